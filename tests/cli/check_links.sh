#!/usr/bin/env bash
# The simulator's binary links no LibTorch, CUDA or NCCL; the executor does.
#   check_links.sh PIPETWIN PIPETWIN_EXEC
# The same pattern must find LibTorch in the executor, so that a pattern that
# matches nothing cannot pass.
set -euo pipefail
pipetwin=$1 executor=$2
heavy='lib(torch|c10|cuda|cudart|nccl|cublas|cudnn|nvrtc|nvToolsExt|cusparse|cufft|curand)[^ ]*\.so'
fail=0
sim_libs=$(ldd "$pipetwin")
exec_libs=$(ldd "$executor")
if ! grep -q 'libsimgrid' <<<"$sim_libs"; then
  echo "FAIL: ldd $pipetwin does not list libsimgrid: is this the simulator's binary?"; fail=1
fi
if found=$(grep -Eo "$heavy" <<<"$sim_libs" | sort -u | tr '\n' ' ') && [ -n "$found" ]; then
  echo "FAIL: $pipetwin links $found"; fail=1
fi
if ! grep -Eq 'libtorch[^ ]*\.so' <<<"$exec_libs" || ! grep -Eq 'libc10[^ ]*\.so' <<<"$exec_libs"; then
  echo "FAIL: ldd $executor lists no libtorch/libc10: the check's pattern is not proven"; fail=1
fi
[ "$fail" = 0 ] && echo "ok: $(basename "$pipetwin") links $(wc -l <<<"$sim_libs") libraries, none of LibTorch, CUDA or NCCL; $(basename "$executor") links $(grep -Ec "$heavy" <<<"$exec_libs") of them"
exit "$fail"
