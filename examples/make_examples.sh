#!/usr/bin/env bash
# Regenerates the bundled example archives (needs the torch extra: pip install -e ".[torch]").
# Deterministic on the CPU: the same command gives the same predictions.
set -euo pipefail
cd "$(dirname "$0")"
common=(--dataset digits --model mlp --shifts rotate,noise --shift-samples 300 --ood uniform
        --threads 1 --device cpu --seed 0 --overwrite --no-progress)
ubench produce deep_ensemble --members 5 --epochs 20 "${common[@]}" --out digits_deep_ensemble.h5
ubench produce sgd --epochs 20 "${common[@]}" --out digits_sgd.h5
ubench produce mc_dropout --members 8 --epochs 20 "${common[@]}" --out digits_mc_dropout.h5
# Trusted labels for `ubench score --reference` (what a benchmark host keeps to itself).
rm -f digits_reference.h5
ubench reference digits_deep_ensemble.h5 --out digits_reference.h5
ls -l ./*.h5
