// `fp8kit lab`: lab 3.2.3 ("FP8 Training and Inference") run for real on this machine, the GPU when
// there is one, written as one self-contained HTML page (index.html) with a CSV file for every table.
#include "base/error.h"
#include "base/version.h"
#include "cli/command.h"
#include "cli/options.h"
#include "lab/lab.h"
#include "lab/page.h"
#include "report/html.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#if FP8KIT_HAVE_CUDA
#include "runtime/cuda/device_info.h"
#endif

namespace fp8kit::cli {
namespace {

namespace fs = std::filesystem;

struct Args {
  std::string out = "out/lab";
  std::string device;  // empty: cuda when a GPU answers, else cpu
  bool quick = false;
  uint64_t seed = 42;
  std::vector<int64_t> train_batches, infer_batches;
  int warmup_steps = -1, timed_steps = -1;  // -1: the device's default
};

// The sizes of each device (and of --quick), then what the options override.
lab::LabOptions lab_options(const Args& args) {
  lab::LabOptions o;
  if (args.device.empty()) {
    o.device = cuda_available() ? Device::Cuda : Device::Cpu;
  } else {
    o.device = parse_device(args.device);
    if (o.device == Device::Cuda) {
      try {
        require_cuda();
      } catch (const Error& e) {
        fail("--device cuda: {}", e.what());
      }
    }
  }
  if (args.quick) {
    o.train_batches = o.infer_batches = {8};
    o.warmup_steps = 1, o.timed_steps = 2;
  } else if (o.device == Device::Cuda) {
    o.train_batches = {32, 1024, 8192, 16384, 32768};
    o.infer_batches = {32, 1024, 16384};
  } else {
    o.train_batches = o.infer_batches = {32, 256};
    o.warmup_steps = 2, o.timed_steps = 10;
  }
  if (!args.train_batches.empty()) o.train_batches = args.train_batches;
  if (!args.infer_batches.empty()) o.infer_batches = args.infer_batches;
  if (args.warmup_steps >= 0) o.warmup_steps = args.warmup_steps;
  if (args.timed_steps >= 0) o.timed_steps = args.timed_steps;
  o.seed = args.seed;
  o.out = args.out;
  return o;
}

// Creates the output folder and checks that a file can be written there, before minutes of work.
void prepare_output(const fs::path& out) {
  std::error_code ec;
  fs::create_directories(out, ec);
  FP8KIT_CHECK(!ec && fs::is_directory(out), "--out {}: cannot create the folder: {}; pick another --out",
               out.string(), ec ? ec.message() : "a file of that name exists");
  const fs::path probe = out / ".fp8kit-lab-write-test";
  const bool writable = std::ofstream(probe).good();
  fs::remove(probe, ec);
  FP8KIT_CHECK(writable, "--out {}: the folder is not writable; pick another --out", out.string());
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

std::string device_description(Device device) {
#if FP8KIT_HAVE_CUDA
  if (device == Device::Cuda) {
    const auto devices = cuda::list_devices();
    if (!devices.empty()) {
      const auto& d = devices.front();
      return fmt::format("GPU {}: {}, compute capability {}.{}, {} SMs, {:.1f} GiB, FP8 tensor cores: {}", d.index,
                         d.name, d.major, d.minor, d.multiprocessors, d.global_memory_bytes / double(1 << 30),
                         d.has_fp8() ? "yes" : "no");
    }
  }
#endif
  if (device == Device::Cuda) return "CUDA GPU";
  return "CPU (exact FP8 emulation; no GPU " +
         std::string(cuda_available() ? "asked for)" : "here, or no CUDA backend in this build)");
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

std::string join(const std::vector<int64_t>& values) {
  std::string text;
  for (int64_t v : values) text += (text.empty() ? "" : ", ") + std::to_string(v);
  return text;
}

void introduction(report::HtmlPage& page, const lab::LabOptions& o, bool quick) {
  page.paragraph(
      "Lab 3.2.3, \"FP8 Training and Inference\", run for real by fp8kit: the FP8 formats, the lab's MLP trained "
      "in bf16 and in FP8 (E4M3 forward, E5M2 backward, delayed scaling), FP8 inference, delayed scaling and "
      "both exercises, with fp8kit's bit-exact FP8 casts in place of the notebook's simulation. Every table is "
      "also a CSV file beside this page.");
  std::vector<report::CsvRow> rows{
      {"device", device_description(o.device)},
      {"host CPU", fmt::format("{}, {} hardware threads", cpu_model(), std::thread::hardware_concurrency())},
      {"run at", utc_now()},
      {"fp8kit", std::string(kVersion)},
      {"seed", std::to_string(o.seed)},
      {"training batch sizes (Part 2)", join(o.train_batches)},
      {"inference batch sizes (Part 3)", join(o.infer_batches)},
      {"warm-up and timed steps", fmt::format("{} and {}", o.warmup_steps, o.timed_steps)},
  };
  lab::csv_table(page, o, "run.csv", {"what", "value"}, rows, "This run");
  if (quick) page.callout("--quick: tiny sizes for a test run; the timings mean nothing.", report::Tone::Warn);
}

void run(const Args& args) {
  const lab::LabOptions options = lab_options(args);
  prepare_output(options.out);
  report::HtmlPage page("FP8 training and inference: lab 3.2.3 on " + std::string(name(options.device)));
  introduction(page, options, args.quick);
  using Part = void (*)(report::HtmlPage&, const lab::LabOptions&);
  const std::pair<const char*, Part> parts[] = {
      {"Part 1: FP8 formats", lab::formats_part},
      {"Part 2: training", lab::training_part},
      {"Part 3: inference", lab::inference_part},
      {"Part 4 and exercise 1: delayed scaling", lab::delayed_scaling_part},
      {"Exercise 2: E4M3 against E5M2 for gradients", lab::gradient_formats_part},
      {"Simulated against real FP8", lab::simulated_fp8_part},
      {"Common mistakes", lab::common_mistakes_part},
  };
  fmt::print("fp8kit lab on {}, writing {}/\n", name(options.device), options.out.string());
  for (const auto& [title, part] : parts) {
    const auto start = std::chrono::steady_clock::now();
    part(page, options);
    fmt::print("  {:<48} {:>8.1f} s\n", title,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const fs::path index = options.out / "index.html";
  page.write(index.string());
  int csv_files = 0;
  for (const auto& entry : fs::directory_iterator(options.out)) csv_files += entry.path().extension() == ".csv";
  fmt::print("wrote {} ({} CSV files beside it); open it in a browser\n", index.string(), csv_files);
}

void setup(CLI::App& app) {
  auto args = std::make_shared<Args>();
  app.add_option("--out", args->out, "folder for index.html and the CSV files (created if missing)")
      ->capture_default_str()
      ->check(non_empty_path());
  app.add_option("--device", args->device, "cpu or cuda (default: cuda when a GPU answers, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--quick", args->quick, "tiny sizes, for tests");
  add_seed_option(app, args->seed, "seed of the data, the models and the sample tensors");
  app.add_option("--train-batches", args->train_batches, "Part 2's batch sizes (e.g. 32,1024)")
      ->delimiter(',')
      ->check(whole_number(1, 1 << 20));
  app.add_option("--infer-batches", args->infer_batches, "Part 3's batch sizes (e.g. 32,1024)")
      ->delimiter(',')
      ->check(whole_number(1, 1 << 20));
  app.add_option("--warmup-steps", args->warmup_steps, "untimed steps before each timing (lab: 10)")
      ->check(whole_number(0, 100'000));
  app.add_option("--timed-steps", args->timed_steps, "timed steps per measurement (lab: 100)")
      ->check(whole_number(1, 100'000));
  app.footer(
      "Writes DIR/index.html (inline SVG plots, no scripts, nothing fetched) and a CSV file per table.\n"
      "Default sizes: GPU training batches 32, 1024, 8192, 16384, 32768 and inference 32, 1024, 16384 with\n"
      "10 + 100 steps; CPU 32 and 256 with 2 + 10 steps.");
  app.callback([args] { run(*args); });
}

const bool registered = register_command(
    {"lab", "Run lab 3.2.3 (FP8 training and inference) for real and write an HTML report with CSV files", setup});

}  // namespace
}  // namespace fp8kit::cli
