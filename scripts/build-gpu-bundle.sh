#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh runs on a GPU machine that has no Rust toolchain: release-mode
# test binaries of the CUDA runtime and the `smelt` CLI, all WITHOUT the LLVM feature (so they need
# no libLLVM), stripped, in the git-ignored folder <repo>/gpu-bundle/:
#
#   gpu-bundle/bin/<test name>    cuda_exec, cache_concurrency, cache_entries, cache_prune,
#                                 cuda_nvrtc, cuda_probe, cuda_codegen, smelt_runtime_lib
#                                 (the unit tests)
#   gpu-bundle/bin/smelt          the CLI (`smelt bench --device cuda`, `smelt demo`)
#   gpu-bundle/MANIFEST.txt       git revision, build date, the glibc it needs, file sizes
#   gpu-bundle/SOURCES.sha256     the hashes of the sources it was built from (gpu-check.sh
#                                 warns when the tree differs)
#
# Usage: scripts/build-gpu-bundle.sh [--max-mib N]   (default 60: the bundle must travel with the
# working tree, which the GPU session limits to 64 MiB). Fails when the bundle is larger.
# Environment: CARGO (default cargo), SMELT_BUNDLE_DIR (default <repo>/gpu-bundle).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
cargo="${CARGO:-cargo}"
out="${SMELT_BUNDLE_DIR:-$repo/gpu-bundle}"
max_mib=60
if [[ "${1:-}" == "--max-mib" ]]; then
  max_mib="${2:?--max-mib needs a number}"
fi

tests=(cuda_exec cache_concurrency cache_entries cache_prune cuda_nvrtc cuda_probe cuda_codegen)
test_args=()
for t in "${tests[@]}"; do
  test_args+=(--test "$t")
done

json="$(mktemp)"
trap 'rm -f "$json"' EXIT

echo "building test binaries (release, --no-default-features) ..." >&2
"$cargo" test --no-run --release --no-default-features -p smelt-runtime --lib "${test_args[@]}" \
  --message-format=json >"$json"
echo "building the smelt CLI (release, --no-default-features) ..." >&2
"$cargo" build --release --no-default-features --bin smelt --message-format=json >>"$json"

rm -rf "$out.tmp"
mkdir -p "$out.tmp/bin"
# Pick each artefact's executable from cargo's JSON messages: test targets by name (the lib's
# unit tests as smelt_runtime_lib), and the smelt binary.
python3 - "$json" "$out.tmp/bin" "${tests[*]}" <<'EOF'
import json, shutil, sys
path, dest, wanted = sys.argv[1], sys.argv[2], set(sys.argv[3].split())
found = {}
for line in open(path):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    pkg = m["package_id"]
    kinds = t["kind"]
    if m["profile"]["test"]:
        if "test" in kinds and t["name"] in wanted:
            found[t["name"]] = m["executable"]
        elif "lib" in kinds and t["name"] == "smelt_runtime":
            found["smelt_runtime_lib"] = m["executable"]
    elif "bin" in kinds and t["name"] == "smelt":
        found["smelt"] = m["executable"]
missing = (wanted | {"smelt_runtime_lib", "smelt"}) - set(found)
if missing:
    sys.exit(f"missing artefacts: {sorted(missing)}")
for name, exe in sorted(found.items()):
    shutil.copy2(exe, f"{dest}/{name}")
    print(f"{name} <- {exe}", file=sys.stderr)
EOF

strip "$out.tmp"/bin/*
{
  echo "smelt GPU bundle"
  echo "revision: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
  echo "features: --no-default-features (no LLVM)"
  if command -v objdump >/dev/null; then
    echo "needs: glibc >= $(objdump -T "$out.tmp"/bin/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' |
      sed 's/GLIBC_//' | sort -V | tail -1)"
  fi
  echo "files:"
  (cd "$out.tmp/bin" && ls -l | awk 'NR > 1 { printf "  %-22s %10d bytes\n", $9, $5 }')
} >"$out.tmp/MANIFEST.txt"

# The sources the binaries came from, so that gpu-check.sh can tell (without git) whether the
# tree it runs in is the one the bundle was built from.
git -C "$repo" ls-files -z -- Cargo.toml Cargo.lock codegen frontend ir passes runtime src |
  (cd "$repo" && xargs -0 sha256sum) >"$out.tmp/SOURCES.sha256"
total_kib=$(du -sk "$out.tmp" | cut -f1)
echo "total: $((total_kib / 1024)) MiB (${total_kib} KiB)" >>"$out.tmp/MANIFEST.txt"
rm -rf "$out"
mv "$out.tmp" "$out"
cat "$out/MANIFEST.txt"
if (( total_kib > max_mib * 1024 )); then
  echo "error: the bundle is $((total_kib / 1024)) MiB, over the ${max_mib} MiB limit" >&2
  exit 1
fi
