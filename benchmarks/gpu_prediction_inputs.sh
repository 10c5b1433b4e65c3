#!/bin/bash
# The prediction's single-GPU inputs (docs/prediction.md) on one CUDA GPU: the trainer's epoch
# records must carry epoch_overhead_s beside steps and step_time_mean_s, as on the CPU.
# Usage: bash benchmarks/gpu_prediction_inputs.sh OUT_DIR   (prints `name value unit` lines)
set -euo pipefail
out=${1:?output folder}
mkdir -p "$out"
python3 -c 'import torch, torchvision; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0))'
python3 scripts/make_imagefolder.py --help >/dev/null 2>&1 || true
python3 - "$out" <<'PY'
import sys
sys.path.insert(0, "scripts")
import make_imagefolder
make_imagefolder.make_imagefolder(sys.argv[1] + "/folder", 10, 256, 2, size=224, seed=0)
PY
run() {  # model batch precision epochs
  python3 scripts/train_torch.py --data "$out/folder" --dataset-name synthetic --model "$1" --gpus 1 \
    --resolution 224 --per-gpu-batch "$2" --precision "$3" --epochs "$4" --num-workers 4 > "$out/$1.log" 2> "$out/$1.err" || { tail -20 "$out/$1.err"; return 1; }
  python3 - "$out/$1.log" "$1" <<'PY'
import json, sys
records = [json.loads(l.split(":::SCALESWEEP ", 1)[1]) for l in open(sys.argv[1]) if ":::SCALESWEEP " in l]
for r in records:
    if r["record"] == "epoch":
        print(f"{sys.argv[2]}_epoch{r['epoch']} steps={r['steps']} seconds={r['seconds']:.4f} step_mean={r['step_time_mean_s']} overhead={r.get('epoch_overhead_s')}")
s = records[-1]
print(f"{sys.argv[2]}_status {s['status']} {s.get('reason')}")
PY
}
run resnet18 128 bf16 4
run vit_h_14 128 bf16 3
