#!/bin/bash
# A sweep on a Slurm cluster: every (regime, seed) of the grid is one task of one job array, submitted by submitit
# from a login node (no sbatch script to write). Run it from the folder holding your data and reward module; the
# sweep folder must be on a filesystem the compute nodes share (it is the only state the jobs share).
#   bash examples/slurm/sweep.sh [more mutualrl sweep / train options]
# Run the same command again after a failure or a time limit: finished runs are reused, the others resubmitted.
# No #SBATCH line to write for the time limit: each task asks for SIGUSR2 long enough before it for its run to finish
# a step and save (submitit's #SBATCH --signal=USR2@N, N from the runs' plans: "stop signal N s before the limit");
# `scancel --signal=TERM ARRAYID` stops the runs early the same way (docs/launch.md "Time limit").
set -euo pipefail
source "${MUTUALRL_VENV:-$PWD/.venv}/bin/activate"

# --slurm-mem: each task's host RAM in GB (sbatch --mem). Left out, the sweep asks for what the runs' plans need plus
# 25%, and refuses a value below the need; the figure is the "Host RAM" line of
#   mutualrl train --pool 2qwen --dry-run --gpus 8 --gpu-memory 80   (2qwen: about 56 GiB, "Slurm --mem 70G").
mutualrl sweep --pool 2qwen --regimes standalone,sgt,xgrpo --seeds 1,2,3 -o "${SWEEP_DIR:-$PWD/sweeps/2qwen}" \
    --slurm --slurm-gpus 8 --slurm-cpus 32 --slurm-mem 70 --slurm-time 2880 --slurm-parallel 4 "$@"
# then: mutualrl report "$SWEEP_DIR"; mutualrl plot --group-by regime "$SWEEP_DIR" -o figs
