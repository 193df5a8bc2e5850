# lit configuration for gptc: FileCheck tests of the dialect, the passes and
# the gptc CLI, plus the PyTorch reference checks (run with /usr/bin/python3,
# Debian's python3-torch).
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "gptc"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.gptc_obj_root, "test")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "Inputs"]

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.gptc_tools_dir, append_path=True)
config.environment["GPTC_DEPS"] = config.gptc_deps_dir
# Two cores: let OpenMP and OpenBLAS share them rather than oversubscribe.
config.environment["OMP_NUM_THREADS"] = "1"
config.environment["OPENBLAS_NUM_THREADS"] = "1"

# A machine with an NVIDIA GPU: the checks of what happens without one say
# UNSUPPORTED: cuda-device.
if os.path.exists("/dev/nvidiactl"):
    config.available_features.add("cuda-device")

config.substitutions.append(("%gptc-opt", os.path.join(config.gptc_tools_dir, "gptc-opt")))
config.substitutions.append(("%gptc-runtime", os.path.join(config.gptc_tools_dir, "gptc-runtime")))
config.substitutions.append(("%gptc", os.path.join(config.gptc_tools_dir, "gptc")))
config.substitutions.append(("%python", "/usr/bin/python3"))
config.substitutions.append(("%src", config.gptc_src_root))
# bench/gpu's attention_bench, run on the fake driver (unittests/Runtime's
# libcuda.so.1 over host memory).
config.substitutions.append(("%attention-bench", os.path.join(config.gptc_tools_dir, "attention_bench")))
config.substitutions.append(("%wgmma-probe", os.path.join(config.gptc_tools_dir, "wgmma_probe")))
config.substitutions.append(("%fake-cuda", os.path.join(config.gptc_obj_root, "unittests", "Runtime", "fake-cuda")))
