#!/usr/bin/env bash
# Finds the IMDB reviews (aclImdb_v1.tar.gz) or downloads them, and prints the path on stdout.
# Same lookup as fp8kit's data::find_imdb: PATH if given; else $FP8KIT_DATA (the file, or a folder
# holding aclImdb_v1.tar.gz or aclImdb/), data/, ../shared/datasets/ (relative to the current
# directory, then to the repository); else downloads the official tarball into $FP8KIT_DATA or
# <repo>/data and checks its sha256. The data is never committed (data/ is gitignored).
#   usage: scripts/get-imdb.sh [PATH]
set -euo pipefail

url="https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
sha256="c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe"
name="aclImdb_v1.tar.gz"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [ $# -gt 1 ]; then
  echo "usage: $0 [PATH]" >&2
  exit 2
fi
if [ $# -eq 1 ]; then
  [ -e "$1" ] || { echo "error: $1 does not exist: pass $name or its extracted aclImdb folder" >&2; exit 1; }
  echo "$1"
  exit 0
fi

candidates=()
if [ -n "${FP8KIT_DATA:-}" ]; then
  if [ -f "$FP8KIT_DATA" ]; then
    echo "$FP8KIT_DATA"
    exit 0
  fi
  candidates+=("$FP8KIT_DATA/$name" "$FP8KIT_DATA/aclImdb")
fi
for base in "$PWD" "$repo"; do
  candidates+=("$base/data/$name" "$base/data/aclImdb" "$base/../shared/datasets/$name")
done
for candidate in "${candidates[@]}"; do
  if [ -e "$candidate" ]; then
    realpath -m "$candidate"
    exit 0
  fi
done

dir="${FP8KIT_DATA:-$repo/data}"
mkdir -p "$dir"
target="$dir/$name"
echo "IMDB data not found; downloading $url to $target" >&2
if ! curl -fL --retry 3 --connect-timeout 30 -o "$target.part" "$url"; then
  rm -f "$target.part"
  echo "error: the download failed. Download $url yourself (sha256 $sha256) and pass its path or set FP8KIT_DATA" >&2
  exit 1
fi
actual="$(sha256sum "$target.part" | cut -d' ' -f1)"
if [ "$actual" != "$sha256" ]; then
  rm -f "$target.part"
  echo "error: the download has sha256 $actual, expected $sha256: it is corrupt; try again" >&2
  exit 1
fi
mv "$target.part" "$target"
echo "$target"
