// Uses an installed fp8kit as a consumer would: quantizes a few values to E4M3 and round-trips
// them through a safetensors file image. Prints "ok" and exits 0 when everything matches.
#include <fp8kit/base/version.h>
#include <fp8kit/io/safetensors.h>
#include <fp8kit/numerics/convert.h>

#include <cstdio>
#include <vector>

int main() {
  using namespace fp8kit;
  const std::vector<float> x = {1.0f, -0.5f, 3.0f, 448.0f, 1000.0f};
  std::vector<uint8_t> codes(x.size());
  const float amax = quantize_fp8(x, 1.0f, Fp8Format::E4M3, codes);
  std::vector<float> back(x.size());
  dequantize_fp8(codes, Fp8Format::E4M3, 1.0f, back);
  // 1000 saturates to E4M3's largest finite value, 448; the others are exact.
  const std::vector<float> expected = {1.0f, -0.5f, 3.0f, 448.0f, 448.0f};

  io::SafetensorsFile file;
  file.metadata["producer"] = "fp8kit " + std::string(kVersion);
  file.tensors.push_back(io::f32_tensor("dequantized", {5}, back));
  const io::SafetensorsFile read = io::parse_safetensors(io::serialize_safetensors(file));
  const io::StoredTensor* t = read.find("dequantized");

  if (amax != 1000.0f || back != expected || t == nullptr || t->to_f32() != expected ||
      read.metadata.at("producer") != file.metadata["producer"]) {
    std::fprintf(stderr, "consumer: fp8kit gave unexpected results\n");
    return 1;
  }
  std::printf("ok (fp8kit %s)\n", std::string(kVersion).c_str());
  return 0;
}
