"""What a mutualrl process needs of the machine it runs on, in one place (layer 0; importing the package imports
nothing).

Every host: a worker imports torch, transformers and TRL with the garbage collector paused (:mod:`.process_start`),
glibc keeps a step's large buffers for reuse (:mod:`.allocator`, settings the launcher and the set-up give the
processes that train), a finished process leaves without the libraries' teardown (:mod:`.process_exit`), a
sweep's run dies with the sweep (:mod:`.parent_death`), the signals that stop a run with a checkpoint are named once
(:mod:`.stop_signals`) and a GPU policy's ``accelerate launch`` leaves them to its ranks (:mod:`.accelerate_launch`),
the commands that print a report keep the libraries' warnings and log lines out of it (:mod:`.quiet_libraries`), and a
lock file shared by processes and accounts is
opened so other accounts cannot take it, probed through the OS lock, and waited for with a bound that names its
holder (:mod:`.file_lock`); the test suite's budgets count the lines a start and a launch note (:mod:`.count_logs`).
An NVIDIA host: what ``nvidia-smi`` says of the driver and the newest CUDA it runs, and which CUDA a torch or vLLM
build needs (:mod:`.cuda_driver`, the set-up's check before it installs the GPU set). A CPU host: which vLLM build is installed and whether it runs here, and the CPU path's settings (:mod:`.vllm_cpu`,
read from package metadata), the trainer's weights into a colocated vLLM engine on a CPU (:mod:`.vllm_cpu_sync`),
and TRL's fused LM head scoring only the completion tokens on a CPU (:mod:`.trl_cpu_lm_head_patch`).
"""
