#!/bin/sh
# Seed inputs for the fuzz targets, from the files sluice reads and writes:
# built-in profiles, tests/data and tests/bad, plans from `plan --out` and
# `sim --out`, schedule CSVs from `sim --emit-schedule`, checkpoints from
# `exec --save`, and command lines of every option. Writes OUT/<target>/;
# `make fuzz-merge` then keeps the fewest that cover the same code.
#   sh tests/fuzz/seeds.sh build-fuzz/seeds     (after make; from the top)
set -eu
out=${1:?usage: seeds.sh OUT}
sluice=${SLUICE_BIN:-bin/sluice}
for t in gpus hw model plan schedcsv ckpt cli_profile cli_sim cli_plan \
         cli_validate cli_exec; do
    mkdir -p "$out/$t"
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- profiles
cp profiles/hw/gpus.json tests/bad/hw/gpus_*.json "$out/gpus/"
cp profiles/hw/example-*.json tests/bad/hw/*.json "$out/hw/"
cp profiles/models/*.json tests/bad/model/*.json "$out/model/"
for d in tests/data/hf/*/; do
    cp "$d/config.json" "$out/model/hf-$(basename "$d").json"
done

# ---- plans and schedule CSVs
hw="--hw rtx2080ti x8"
i=0
plan() { # plan FILE-NAME sluice-plan-args...
    n=$1; shift
    "$sluice" plan $hw --no-progress --out "$out/plan/$n.json" "$@" \
        >/dev/null
}
plan t5 --model t5-3b
plan gpt2-2bw --model gpt2-xl --schedule 2bw --pp 8
plan mini-wave --model gpt-mini --schedule wave
plan tiny-dp --model gpt-tiny --dp 2 --tp 2 --recompute
for s in gpipe 1f1b mixed mixed-1f1b mixed-gpipe wave interleaved zb-h1 \
         zb-v chimera dualpipev 2bw; do
    i=$((i + 1))
    case $s in
        interleaved) extra="--chunks 2" ;;
        wave) extra="--waves 2" ;;
        mixed*) extra="--stages 6" ;;
        *) extra="" ;;
    esac
    # shellcheck disable=SC2086
    "$sluice" sim $hw --model gpt-tiny --schedule $s --pp 2 --mbs 1 \
        --microbatches 4 $extra --out "$out/plan/sim-$s.json" >/dev/null
    opts="--schedule $s --pp 2 --microbatches 4 $extra"
    # shellcheck disable=SC2086
    if "$sluice" sim $hw --model gpt-tiny --mbs 1 $opts --emit-schedule \
        >"$tmp/csv" 2>/dev/null; then
        { echo "$opts"; cat "$tmp/csv"; } >"$out/schedcsv/$s.txt"
    fi
done
"$sluice" sim $hw --model gpt-tiny --schedule 1f1b --pp 4 --mbs 1 \
    --microbatches 8 --recompute --emit-schedule >"$tmp/csv"
{ echo "--schedule 1f1b --pp 4 --microbatches 8 --recompute"; cat "$tmp/csv"; } \
    >"$out/schedcsv/1f1b-pp4-recompute.txt"
cp tests/bad/plan/*.json "$out/plan/"
for f in tests/bad/sched/*.csv; do
    { echo "--pp 2 --microbatches 2"; cat "$f"; } \
        >"$out/schedcsv/bad-$(basename "$f" .csv).txt"
done

# ---- checkpoints: a GPT of 276 parameters (the 256 byte tokens), so that
# a file is 3 KiB
micro() { # micro NAME TIED BIAS
    cat >"$tmp/$1.json" <<EOF
{"name": "$1", "family": "gpt", "hidden": 1, "layers": 1, "heads": 1,
 "ffn": 1, "vocab": 256, "seq_len": 2, "max_pos": 2, "tied_embeddings": $2,
 "bias": $3, "dropout": false, "dtype": "fp32", "source": "fuzz seed"}
EOF
    "$sluice" exec --model "$tmp/$1.json" --steps 2 --batch 2 \
        --save "$out/ckpt/$1.ckpt" --quiet >/dev/null
}
micro micro-tied true true
micro micro-untied false false
# a Llama's (RoPE base and norm epsilon of its own), and the states LoRA
# and QLoRA plans save beside their checkpoints
cat >"$tmp/ml.json" <<EOF
{"name": "micro-llama", "family": "llama", "hidden": 4, "layers": 1,
 "heads": 2, "kv_heads": 1, "ffn": 2, "vocab": 256, "seq_len": 2,
 "tied_embeddings": false, "bias": false, "dropout": false, "dtype": "fp32",
 "rope_theta": 500000, "norm_eps": 1e-6, "source": "fuzz seed"}
EOF
"$sluice" exec --model "$tmp/ml.json" --steps 2 --batch 2 \
    --save "$out/ckpt/micro-llama.ckpt" --quiet >/dev/null
lora_state() { # lora_state MODEL MODE SEED-NAME
    "$sluice" sim --hw cpu x1 --model "$tmp/$1.json" --schedule gpipe --pp 1 \
        --mbs 2 --microbatches 1 --finetune "$2" --out "$tmp/$1-ft.json" \
        >/dev/null
    "$sluice" exec --plan "$tmp/$1-ft.json" --steps 2 \
        --save "$tmp/$1-ft.ckpt" --quiet >/dev/null
    cp "$tmp/$1-ft.ckpt.lora" "$out/ckpt/$3.lora"
}
lora_state micro-untied lora:1 micro-untied-lora
lora_state ml qlora:1 micro-llama-qlora
# an OPT's (ReLU, positions from the table's row 2) and its LoRA state
cat >"$tmp/mo.json" <<EOF
{"name": "micro-opt", "family": "opt", "hidden": 1, "layers": 1,
 "heads": 1, "ffn": 1, "vocab": 256, "seq_len": 2, "max_pos": 2,
 "tied_embeddings": true, "dropout": false, "dtype": "fp32",
 "source": "fuzz seed"}
EOF
"$sluice" exec --model "$tmp/mo.json" --steps 2 --batch 2 \
    --save "$out/ckpt/micro-opt.ckpt" --quiet >/dev/null
lora_state mo lora:1 micro-opt-lora

# ---- command lines: one argument a line, then NUL-separated files in1..3
# (no '/' or '\' in any of them: the targets refuse paths)
clean() { tr '/\\' '__' <"$1"; }
cli() { # cli TARGET NAME [ARG...]   (files from $f1 $f2 when set)
    t=$1 n=$2; shift 2
    {
        for a in "$@"; do printf '%s\n' "$a"; done
        if [ -n "${f1:-}" ]; then printf '\0'; clean "$f1"; fi
        if [ -n "${f2:-}" ]; then printf '\0'; clean "$f2"; fi
    } >"$out/$t/$n"
}
f1= f2=
cli cli_profile help --help
cli cli_profile list list
cli cli_profile list-json list --json
cli cli_profile show show gpt-tiny
cli cli_profile show-ops show t5-3b --ops --json
cli cli_profile show-seq show gpt2-xl --seq 64 --dtype bf16
cli cli_profile show-hw show --hw rtx2080ti x8 --host-mem 64G --nvme 2 \
    --pcie-gen 4
cli cli_profile show-hw-json show --hw "a100-sxm-80gb x16" \
    --gpus-per-server 8 --json
cli cli_profile typo shwo
f1=profiles/hw/example-desktop.json
cli cli_profile show-hw-file show --hw in1
f1=tests/data/hf/llama-2-7b-hf/config.json
cli cli_profile show-hf show in1 --ops
f1=profiles/hw/example-desktop.json f2=profiles/models/gpt-tiny.json
cli cli_profile validate validate in1 in2
f1= f2=

s8="--hw|rtx2080ti x8|--model|t5-3b|--pp|8|--mbs|4|--microbatches|16"
sim() { n=$1 opts=$2; shift 2
    old=$IFS; IFS='|'
    # shellcheck disable=SC2086
    set -- $opts "$@"
    IFS=$old
    cli cli_sim "$n" "$@"
}
cli cli_sim help --help
sim 1f1b "$s8" --schedule 1f1b
sim gpipe-json "$s8" --schedule gpipe --json --recompute
sim wave-trace "$s8" --schedule wave --waves 2 --trace t.json
sim mixed "$s8" --schedule mixed --stages 16 --partition even --minibatches 4
sim mixed-sync "$s8" --schedule mixed-gpipe --state-bytes 12
sim 2bw "$s8" --schedule 2bw --out p.json
sim interleaved "--hw|a100-sxm-80gb x16|--model|gpt2-xl|--mbs|1" \
    --schedule interleaved --chunks 2 --pp 4 --dp 2 --tp 2 --microbatches 8
sim list "--hw|rtx2080ti x4|--model|gpt-tiny|--mbs|1" --schedule zb-h1 \
    --pp 4 --microbatches 4 --partition 1,2,2,1
for s in zb-v chimera dualpipev mixed-1f1b; do
    sim "$s" "--hw|rtx2080ti x4|--model|gpt-mini|--mbs|2" --schedule "$s" \
        --pp 4 --microbatches 8
done
sim emit "--hw|rtx2080ti x2|--model|gpt-tiny|--mbs|1" --schedule 1f1b --pp 2 \
    --microbatches 2 --emit-schedule
f1=$out/plan/sim-zb-v.json
sim plan-file "--plan|in1|--json"
f1=tests/bad/sched/duplicate.csv
sim schedule-file "--hw|rtx2080ti x2|--model|gpt-tiny|--mbs|1" --pp 2 \
    --microbatches 2 --schedule-file in1
f1=profiles/hw/example-desktop.json f2=profiles/models/gpt-mini.json
sim files "--hw|in1|--model|in2|--mbs|1" --schedule 1f1b --pp 2 \
    --microbatches 4
f1= f2=

cli cli_plan help --help
cli cli_plan tiny --hw "rtx2080ti x8" --model gpt-tiny
cli cli_plan mini --hw rtx2080ti x4 --model gpt-mini --schedule mixed,2bw \
    --pp 4 --json
cli cli_plan gpus --gpus 1,2,4,8 --hw rtx2080ti --model gpt-mini --json
cli cli_plan knobs --hw "v100-sxm2-32gb x8" --model gpt-mini --sync \
    --recompute --reserve 2G --state-bytes 8 --mbs 2 --batch 8 --dp 2 \
    --tp 2 --exhaustive --no-progress --out p.json
cli cli_plan host --hw "rtx2080ti x2" --model gpt-tiny --host-mem 16G \
    --nvme 1 --pcie-gen 4 --no-recompute
f1=profiles/hw/example-desktop.json f2=profiles/models/gpt-tiny.json
cli cli_plan files --hw in1 --model in2
f1= f2=

cat >"$tmp/table.csv" <<'EOF'
# sluice: gpu=a100-sxm-80gb vocab=8 seq=8 recompute=1 schedule=interleaved dtype=fp16
heads,hidden,layers,tensor_parallel,pipeline_parallel,gpus,batch,tflops_per_gpu
2,8,4,1,1,8,8,1
4,8,8,2,2,8,8,1.5
EOF
cli cli_validate help --help
f1=$tmp/table.csv
cli cli_validate table in1
cli cli_validate table-json --json in1
f1=

"$sluice" plan --hw cpu x2 --model gpt-tiny --batch 4 --no-progress \
    --schedule 1f1b --out "$tmp/exec-1f1b.json" >/dev/null
"$sluice" plan --hw cpu x2 --model gpt-tiny --batch 4 --no-progress \
    --schedule 2bw --out "$tmp/exec-2bw.json" >/dev/null
cli cli_exec help --help
cli cli_exec tiny --model gpt-tiny --steps 2 --batch 2 --seq 4 \
    --eval-batches 1 --quiet
cli cli_exec tiny-json --model gpt-tiny --steps 1 --batch 2 --seq 4 --json \
    --save ck --timings t.json
cli cli_exec typo --modle gpt-tiny --steps 1
cli cli_exec both --model gpt-tiny --plan x.json --steps 1
f1=$tmp/exec-1f1b.json
cli cli_exec plan --plan in1 --steps 2 --quiet
cli cli_exec plan-json --plan in1 --steps 1 --json --trace t.json --warm 0
cli cli_exec plan-budget --plan in1 --steps 1 --mem-budget 1M
cli cli_exec plan-batch --plan in1 --steps 1 --batch 2
f1=$tmp/exec-2bw.json
cli cli_exec plan-async --plan in1 --steps 3 --quiet --save ck
f1=
