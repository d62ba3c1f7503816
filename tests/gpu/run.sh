#!/bin/sh
# GPU checks of the CUDA backend, not part of `make test` (which never needs
# CUDA). Builds with `make cuda`; with a GPU it runs
#   (a) one step of a 2-stage 1F1B plan on one GPU as two workers, its
#       weights compared with the CPU backend's: every weight within 1e-6,
#       except at most 1e-4 of them (fp32 sums in another order move a
#       gradient by ~1e-6 of its size; AdamW's first step moves a weight
#       by about lr in its gradient's sign, so a gradient within that
#       noise of zero may step the other way; no weight may differ more);
#   (b) 20 steps of 1F1B for GPT-2 on two workers (two GPUs when there
#       are two) with --json: measured against simulated iteration time
#       and per-device compute; (b1) 10 steps of GPT-2 on one GPU as one
#       worker, the comparison where nothing is shared; (b2) (b1)'s
#       plan with --tf32 (the products on the tensor cores): measured
#       against the simulator's TF32 pricing, its losses step by step
#       within 2% of (b1)'s;
#   (c) bin/sluice-cuda-test: every CUDA kernel against the CPU oracle;
#   (d) (run last) sluice calibrate on the GPU(s), then (b1)'s plan run again with
#       --calibrate (its op times join the calibration: one worker per
#       GPU, so nothing is shared) and (b)'s without: measured against the
#       calibrated prediction (the executor computes in fp32, so these
#       predictions are of fp32 math), (b2) with --calibrate and a
#       plan of microbatch 8 x 4 in TF32 predicted from its products'
#       times, and (b) with --calibrate on one
#       GPU refused before it runs; then zero-offload's GPT-2 run
#       of (f) adds the host's AdamW rate, and fuyou's is predicted again;
#   (e) one step of each kind of plan against the CPU backend's, as (a):
#       tensor parallelism, ZeRO-1, -2 and -3 data parallelism, LoRA,
#       recomputation, zero-bubble and interleaved schedules (their workers
#       on one GPU), the tier schedules (zero-offload, fuyou with its
#       states in DRAM, zero-infinity with them in a file on the drive;
#       zero-offload and zero-infinity over two data-parallel ranks),
#       stage tiers (one stage's AdamW state in DRAM, the other's in a
#       file), Llama's decoder (tensor parallel, and QLoRA's 4-bit base)
#       and a graph with fused attention;
#   (f) GPT-2 under fuyou and zero-offload (states in DRAM) and
#       zero-infinity (states in a file on the drive), 4 steps:
#       measured against simulated iteration time and each tier resource
#       (PCIe each way, the CPU's AdamW); the bytes moved must be within
#       5% of the simulation's, and the host's peak of the simulator's
#       count over the run's own task times (the peak follows the timing:
#       the plan's drives are not this machine's).
#   (h) GPT-2 on one GPU with its AdamW state in host DRAM (a stage tier:
#       gradient out, the host's AdamW, weights back) and on the GPU:
#       measured against simulated iteration and peak;
#   (g) cuBLAS's sustained GEMM rate for a transformer layer's shapes
#       (build/gpu/gemm_rate) in bf16, TF32 and fp32, each as a share of
#       the profile's peak for it: what the profile's GEMM efficiency
#       (gemm_max and its curve) should say; and 18 shapes whose widths
#       or depths are and are not 16 bytes aligned (the profile's
#       unaligned, profiles/hw/README.md);
#   (t) where python3 has PyTorch with CUDA: an MPT block's ops as PyTorch
#       runs them in bf16 (tests/gpu/torch_ops.py) beside `sluice sim
#       --ops` for the same ops (tests/gpu/torch_ops_compare.py), and a
#       7B model's block run for 30 s (tests/gpu/torch_sustained.py).
# SLUICE_GPU_CHECKS lists the checks to run (default: "a b b1 b2 c d e f g h
# t").
# Without a GPU it says why it skipped and exits 0. Exit 1 when a check
# fails. SLUICE_GPU_HW names the plan's hardware (default: from the GPU's
# name); MAKE_JOBS the build's parallelism (default 2);
# SLUICE_GPU_PREBUILT=1 runs the binaries already in bin/ and build/gpu/
# without calling make (a GPU machine that lacks the build's libraries);
# SLUICE_GPU_KEEP=DIR keeps each check's plan, report and log there.
set -eu
cd "$(dirname "$0")/../.."
[ -n "${SLUICE_GPU_PREBUILT:-}" ] || make -s -j"${MAKE_JOBS:-2}" cuda
bin=bin/sluice-cuda
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-gpu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
keep() {
    [ -z "${SLUICE_GPU_KEEP:-}" ] || cp "$@" "$SLUICE_GPU_KEEP"/ || true
}
# run PLAN STEPS OUT [exec options]: trains PLAN on the GPU, reports
# measured against simulated, keeps the report; a failure fails the script
run() {
    plan=$1 steps=$2 out=$3
    shift 3
    if $bin exec --plan "$plan" --steps "$steps" --data "$data" \
           --backend cuda --json "$@" >"$out"; then
        build/gpu/gpu_check report "$out" || fail=1
        keep "$out"
    else
        fail=1
    fi
}

# the CUDA runtime's own view: sluice-cuda-test exits 77 without a GPU
rc=0
bin/sluice-cuda-test >"$tmp/probe.txt" 2>&1 || rc=$?
if [ "$rc" = 77 ]; then
    echo "tests/gpu/run.sh: skipped, no GPU: $(head -n 1 "$tmp/probe.txt")"
    exit 0
fi

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null |
      head -n 1 || true)
count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
hw=${SLUICE_GPU_HW:-}
if [ -z "$hw" ]; then
    case "$gpu" in
        *H200*NVL*) hw=h200-nvl ;;
        *H200*) hw=h200 ;;
        *H100*PCIe*) hw=h100-pcie ;;
        *H100*) hw=h100-sxm ;;
        *A100*PCI[Ee]*40GB*) hw=a100-pcie-40gb ;;
        *A100*40GB*) hw=a100-sxm-40gb ;;
        *A100*PCIe*) hw=a100-pcie-80gb ;;
        *A100*) hw=a100-sxm-80gb ;;
        *L40S*) hw=l40s ;;
        *" L4") hw=l4 ;;
        *" A10") hw=a10 ;;
        *" A40") hw=a40 ;;
        *" T4") hw=t4 ;;
        *"RTX 6000 Ada"*) hw=rtx6000-ada ;;
        *"RTX 4080") hw=rtx4080 ;;
        *4090*) hw=rtx4090 ;;
        *"RTX 5090") hw=rtx5090 ;;
        *) hw=h100-sxm ;;
    esac
fi
# a corpus of the repository's own text (GPT-2's 1024-token sequences
# need ten blocks of 4100 bytes); SLUICE_GPU_DATA names another
data=${SLUICE_GPU_DATA:-$tmp/corpus.txt}
[ -n "${SLUICE_GPU_DATA:-}" ] || cat README.md exec/*.c >"$data"
echo "tests/gpu/run.sh: ${gpu:-a GPU} (${count:-?} visible), plans for $hw"
fail=0
checks=" ${SLUICE_GPU_CHECKS:-a b b1 b2 c d e f g h t} "
want() {
    case "$checks" in *" $1 "*) return 0 ;; esac
    return 1
}
# same NAME GPUS [sim options] -- [exec options]: one step of the plan on
# the CPU and on the GPU, every weight compared as in (a); the model is
# gpt-mini, or model=NAME's; with against=CKPT
# the GPU's weights are compared with that checkpoint's instead (another
# GPU run), and with against=keep:CKPT the GPU's run is kept there
same() {
    name=$1 n=$2
    shift 2
    sargs=
    while [ $# -gt 0 ] && [ "$1" != -- ]; do sargs="$sargs $1"; shift; done
    [ $# -gt 0 ] && shift
    printf '%-20s ' "$name"
    # shellcheck disable=SC2086
    if ! $bin sim --hw "$hw" x"$n" --model "${model:-gpt-mini}" --mbs 4 \
           --microbatches 4 $sargs --out "$tmp/k.json" >/dev/null; then
        echo "sim failed"; fail=1; return
    fi
    ref=$tmp/kc.ckpt
    case "${against:-}" in
        keep:*) ;;
        ?*) ref=$against ;;
        *) $bin exec --plan "$tmp/k.json" --steps 1 --data "$data" \
               --backend cpu --save "$ref" --quiet "$@" \
               >"$tmp/kc.txt" 2>&1 || ref= ;;
    esac
    gpu=$tmp/kg.ckpt
    case "${against:-}" in keep:*) gpu=${against#keep:} ;; esac
    if [ -n "$ref" ] &&
       $bin exec --plan "$tmp/k.json" --steps 1 --data "$data" \
           --backend cuda --save "$gpu" --quiet "$@" \
           >"$tmp/kg.txt" 2>&1; then
        case "${against:-}" in
            keep:*) echo "kept as the reference" ;;
            *) build/gpu/gpu_check weights "$ref" "$gpu" 1e-6 1e-4 ||
                   fail=1 ;;
        esac
    else
        echo "exec failed:"; tail -n 3 "$tmp/kc.txt" "$tmp/kg.txt"; fail=1
    fi
}

if want a; then
echo "== (a) one step of a 2-stage plan on one GPU (two workers) vs the CPU"
$bin sim --hw "$hw" x2 --model gpt-mini --schedule 1f1b --pp 2 --mbs 4 \
    --microbatches 4 --out "$tmp/two.json" >/dev/null
$bin exec --plan "$tmp/two.json" --steps 1 --data "$data" --backend cpu \
    --save "$tmp/cpu.ckpt" --quiet >"$tmp/cpu.txt"
if CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} $bin exec \
       --plan "$tmp/two.json" --steps 1 --data "$data" --backend cuda \
       --save "$tmp/gpu.ckpt" --quiet >"$tmp/gpu.txt"; then
    build/gpu/gpu_check weights "$tmp/cpu.ckpt" "$tmp/gpu.ckpt" 1e-6 1e-4 ||
        fail=1
else
    fail=1
fi
fi

$bin sim --hw "$hw" x2 --model gpt2 --schedule 1f1b --pp 2 --mbs 8 \
    --microbatches 8 --out "$tmp/gpt2.json" >/dev/null
$bin sim --hw "$hw" x1 --model gpt2 --schedule 1f1b --pp 1 --mbs 8 \
    --microbatches 8 --out "$tmp/one.json" >/dev/null

if want b; then
echo "== (b) 20 steps of 1F1B, GPT-2, measured against simulated"
[ "${count:-1}" -ge 2 ] ||
    echo "(one GPU: both workers share it, the simulation has two)"
run "$tmp/gpt2.json" 20 "$tmp/gpt2-run.json"
fi

if want b1; then
echo "== (b1) the same model on one GPU as one worker (nothing shared)"
run "$tmp/one.json" 10 "$tmp/one-run.json"
fi

if want b2; then
echo "== (b2) (b1)'s plan with its products in TF32"
run "$tmp/one.json" 10 "$tmp/one-tf32.json" --tf32
if [ -f "$tmp/one-run.json" ] && [ -f "$tmp/one-tf32.json" ]; then
    build/gpu/gpu_check losses "$tmp/one-run.json" "$tmp/one-tf32.json" \
        0.02 || fail=1
fi
fi

if want c; then
echo "== (c) every CUDA kernel against the CPU oracle"
bin/sluice-cuda-test || fail=1
fi

if want e; then
echo "== (e) one step of each kind of plan, the GPU against the CPU"
same "tp 2" 2 --schedule 1f1b --pp 1 --tp 2
same "tp 2, sp" 2 --schedule 1f1b --pp 1 --tp 2 \
    --sequence-parallel
# data parallelism's all-reduce in gradient buckets started inside the
# backward (the device waited for at each bucket's edge), and in one
# ring after it
same "dp 2, 64K buckets" 2 --schedule 1f1b --pp 1 --dp 2 --grad-bucket 64K
same "dp 2, one ring" 2 --schedule 1f1b --pp 1 --dp 2 --grad-bucket 0
same "dp 2, zero 1" 2 --schedule 1f1b --pp 1 --dp 2 --zero 1
same "dp 2, zero 2" 2 --schedule 1f1b --pp 1 --dp 2 --zero 2
same "dp 2, zero 3" 2 --schedule 1f1b --pp 1 --dp 2 --zero 3
same "lora 8" 2 --schedule 1f1b --pp 2 --finetune lora:8
same "recompute" 2 --schedule 1f1b --pp 2 --recompute
same "zb-h1" 2 --schedule zb-h1 --pp 2
same "interleaved" 2 --schedule interleaved --pp 2
same "zero-offload" 1 --schedule zero-offload --offload-tier dram
same "zero-infinity" 1 --schedule zero-infinity --offload-tier nvme \
    -- --offload-path "$tmp"
# offload over two data-parallel ranks: shares of the states, rings
same "zero-offload, dp 2" 2 --schedule zero-offload --offload-tier dram \
    --dp 2
same "zero-infinity, dp 2" 2 --schedule zero-infinity --offload-tier nvme \
    --dp 2 -- --offload-path "$tmp"
same "stage tiers" 2 --schedule 1f1b --pp 2 --nvme 1 \
    --state-tiers dram,nvme -- --offload-path "$tmp"
# Without clipping AdamW's first step is lr g / (|g| + eps) at full size
# for every weight, and the GPU's sums against the CPU's moved 1.7e-4 of
# them beyond 1e-6 for the plain 1F1B plan as for fuyou (H100, 2026-11):
# the unclipped runs are compared with the GPU's own 1F1B run, where the
# kernels are the same and only the tiers differ
against=keep:$tmp/ref0.ckpt same "1f1b, clip 0" 2 --schedule 1f1b --pp 2 \
    -- --clip 0
against=$tmp/ref0.ckpt same "fuyou, dram" 1 --schedule fuyou \
    --offload-tier dram -- --clip 0
against=$tmp/ref0.ckpt same "zero-offload, clip 0" 1 \
    --schedule zero-offload --offload-tier dram -- --clip 0
against=
# Llama's decoder (RoPE, RMSNorm, SwiGLU, grouped key and value heads),
# QLoRA's 4-bit base, a graph with fused attention, OPT's decoder
model=llama-tiny same "llama, tp 2" 2 --schedule 1f1b --pp 1 --tp 2
model=llama-tiny same "llama, tp 2, sp" 2 --schedule zb-h1 \
    --pp 1 --tp 2 --sequence-parallel
model=llama-tiny same "llama, qlora 8" 2 --schedule zb-h1 --pp 2 \
    --finetune qlora:8
model=tests/data/exec/gpt-pico-flash.json same "fused attention" 2 \
    --schedule 1f1b --pp 2 --recompute
# OPT's decoder (ReLU, positions from the table's row 2)
model=tests/data/exec/opt-pico.json same "opt, tp 2" 2 --schedule 1f1b \
    --pp 1 --tp 2
# BERT's encoder (attention over every token, post-LayerNorm, token
# types, the pooler, the masked-LM head), fused attention and a pipeline
model=tests/data/exec/bert-pico.json same "bert, dp 2" 2 --schedule 1f1b \
    --pp 1 --dp 2
model=tests/data/exec/bert-pico.json same "bert, tp 2" 2 --schedule 1f1b \
    --pp 1 --tp 2
model=tests/data/exec/bert-pico.json same "bert, tp 2, sp" 2 \
    --schedule 1f1b --pp 1 --tp 2 --sequence-parallel
# T5 (relative position buckets, cross-attention, the scaled head)
model=tests/data/exec/t5-tiny.json same "t5, tp 2" 2 --schedule 1f1b \
    --pp 1 --tp 2
model=tests/data/exec/t5-tiny.json same "t5, tp 2, sp" 2 --schedule 1f1b \
    --pp 1 --tp 2 --sequence-parallel
model=tests/data/exec/bert-pico-flash.json same "bert, fused attention" 2 \
    --schedule zb-h1 --pp 2 --recompute
model=
fi

if want f; then
echo "== (f) GPT-2 with its states off the GPU: measured against simulated"
for st in fuyou:dram zero-offload:dram zero-infinity:nvme; do
    sch=${st%:*}
    $bin sim --hw "$hw" x1 --model gpt2 --schedule "$sch" --mbs 8 \
        --microbatches 4 --offload-tier "${st#*:}" --out "$tmp/$sch.json" \
        >/dev/null
    echo "-- $sch, states in ${st#*:}"
    # the bytes moved within 5% of the simulation's, the host's peak of
    # the simulator's count over the run's own task times
    if $bin exec --plan "$tmp/$sch.json" --steps 4 --data "$data" \
           --backend cuda --clip 0 --offload-path "$tmp" --json \
           >"$tmp/$sch-run.json" 2>"$tmp/$sch-run.txt"; then
        build/gpu/gpu_check tiers "$tmp/$sch-run.json" 0.05 || fail=1
    else
        tail -n 5 "$tmp/$sch-run.txt"
        fail=1
    fi
    keep "$tmp/$sch-run.json"
done
fi

if want h; then
echo "== (h) GPT-2, its optimizer state in host DRAM (stage tiers) or on the GPU"
for st in gpu dram; do
    $bin sim --hw "$hw" x1 --model gpt2 --schedule 1f1b --pp 1 --mbs 8 \
        --microbatches 4 --state-tiers "$st" --out "$tmp/st-$st.json" \
        >/dev/null
    echo "-- AdamW state on the $st"
    if $bin exec --plan "$tmp/st-$st.json" --steps 4 --data "$data" \
           --backend cuda >"$tmp/st-$st-run.txt" 2>&1; then
        sed -n '/^measured/,/^$/p' "$tmp/st-$st-run.txt"
        grep -E '^  (dev|0 )' "$tmp/st-$st-run.txt" || true
    else
        tail -n 5 "$tmp/st-$st-run.txt"
        fail=1
    fi
    keep "$tmp/st-$st-run.txt"
done
fi

if want g; then
echo "== (g) cuBLAS's GEMMs, sustained, against the profile's peaks"
# rows not 16 bytes aligned (the profile's `unaligned`): odd, even and
# 4-aligned widths and depths beside aligned ones, an odd row count
unal="8192x50257x768 8192x50304x768 8192x50257x1600 8192x50304x1600
8192x50257x4096 16384x6143x4096 16384x6144x4096 16384x4096x4095
8193x2501x5008 8192x2504x5008 2048x50257x768 8192x30522x1024
8192x30528x1024 8192x3072x766 8192x3072x764 8192x3070x768 8192x3068x768
8191x3072x768"
for pr in bf16:2 tf32:1 fp32:1; do
    p=${pr%:*}
    peak=$($bin profile show --hw "$hw" x1 --json | tr -d ' \n' |
           sed -n "s/.*\"peak_tflops\":{[^}]*\"$p\":\([0-9.]*\).*/\1/p")
    build/gpu/gemm_rate "${peak:-0}" "${pr#*:}" "$p" || fail=1
    if [ "$p" != fp32 ]; then
        echo "-- $p, aligned and unaligned rows"
        # shellcheck disable=SC2086
        build/gpu/gemm_rate "${peak:-0}" 0.5 "$p" $unal || fail=1
    fi
done
fi

if want t; then
echo "== (t) PyTorch's bf16 ops of an MPT block against sluice sim --ops"
if python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' \
       2>/dev/null; then
    if python3 tests/gpu/torch_ops.py "$tmp/torch_ops.json" 2>"$tmp/t.log" &&
       python3 tests/gpu/torch_ops_compare.py "$tmp/torch_ops.json" "$hw" \
           "$bin" >"$tmp/t.txt"; then
        sed -n '/by role/,$p' "$tmp/t.txt"
        keep "$tmp/torch_ops.json" "$tmp/t.txt"
        # a 7B model's block for 30 s: does the GPU hold its speed?
        python3 tests/gpu/torch_sustained.py "$tmp/sustained.json" 30 ||
            fail=1
        keep "$tmp/sustained.json"
    else
        tail -n 5 "$tmp/t.log" "$tmp/t.txt"; fail=1
    fi
else
    echo "skipped: python3 has no PyTorch with CUDA"
fi
fi

if want d; then
echo "== (d) sluice calibrate on this GPU, then (b1) and (b) predicted again"
# into a profile directory of this run's own: nothing of the user's moves
prof="$tmp/profiles"
mkdir -p "$prof"
n=1
[ "${count:-1}" -ge 2 ] && n=2
if SLUICE_PROFILE_DIR="$prof" $bin calibrate --hw "$hw" x$n \
       --data "$data" >"$tmp/calib.txt" 2>&1; then
    tail -n 25 "$tmp/calib.txt"
    keep "$tmp/calib.txt" "$prof"/*.json
    # the prediction of (b1) from the microbenchmarks alone; its op times
    # then join the calibration (one worker per GPU: nothing shared)
    SLUICE_PROFILE_DIR="$prof"
    export SLUICE_PROFILE_DIR
    echo "(b1) again, simulated with the calibration; its op times added:"
    run "$tmp/one.json" 10 "$tmp/one-cal.json" --calibrate
    echo "(b) again, simulated with the calibration and (b1)'s op times:"
    run "$tmp/gpt2.json" 20 "$tmp/gpt2-cal.json"
    # TF32: (b2) adds its products' times, then microbatch 8 x 4 (another
    # plan of the same ops) is predicted from them
    echo "(b2) again with --calibrate (its products' TF32 times added):"
    run "$tmp/one.json" 6 "$tmp/one-tf32-cal.json" --tf32 --calibrate
    $bin sim --hw "$hw" x1 --model gpt2 --schedule 1f1b --pp 1 --mbs 8 \
        --microbatches 4 --out "$tmp/four.json" >/dev/null
    echo "microbatch 8 x 4 in TF32, simulated with them:"
    run "$tmp/four.json" 6 "$tmp/four-tf32.json" --tf32
    if [ "${count:-1}" -lt 2 ]; then
        # its two workers would share the GPU: refused before it runs
        rc=0
        $bin exec --plan "$tmp/gpt2.json" --steps 1 --data "$data" \
            --backend cuda --calibrate >"$tmp/shared.txt" 2>&1 || rc=$?
        if [ "$rc" = 2 ] && grep -q "would share GPU" "$tmp/shared.txt"; then
            echo "(b) with --calibrate on one GPU: refused before running"
        else
            echo "(b) with --calibrate on one GPU: not refused (exit $rc)"
            fail=1
        fi
    fi
    # the host's rates (the CPU's AdamW) from a zero-offload run, then
    # fuyou predicted with them
    for st in zero-offload:--calibrate fuyou:; do
        sch=${st%:*} opt=${st#*:} what=
        [ -n "$opt" ] && what="; its host rates added"
        $bin sim --hw "$hw" x1 --model gpt2 --schedule "$sch" --mbs 8 \
            --microbatches 4 --offload-tier dram --out "$tmp/c-$sch.json" \
            >/dev/null
        echo "(f) $sch again, simulated with the calibration$what:"
        # shellcheck disable=SC2086
        if $bin exec --plan "$tmp/c-$sch.json" --steps 4 --data "$data" \
               --backend cuda --clip 0 $opt >"$tmp/c-$sch.txt" 2>&1; then
            sed -n '/^measured/,/^$/p;/^  tiers/,$p' "$tmp/c-$sch.txt"
        else
            tail -n 5 "$tmp/c-$sch.txt"
            fail=1
        fi
        keep "$tmp/c-$sch.txt"
    done
    # the profile as the runs left it (their op times and host rates)
    keep "$prof"/*.json
else
    cat "$tmp/calib.txt"
    fail=1
fi
fi

[ "$fail" = 0 ] && echo "tests/gpu/run.sh: all checks passed" ||
    echo "tests/gpu/run.sh: a check FAILED"
exit "$fail"
