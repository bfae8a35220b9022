"""Build of the C extension myatt._myatt (metadata lives in pyproject.toml)."""
import glob

import numpy
from setuptools import Extension, setup

# -O3 and nothing that changes semantics: no -march=native (one build runs on any
# x86-64; ISA-specific kernels carry their own target attributes and are picked at
# run time), no -ffast-math (it breaks NaN propagation and sets flush-to-zero for
# the whole process), no FMA contraction (the portable kernels stay the exact
# reference that the SIMD ones are compared against).
extra_compile_args = ["-O3", "-std=c11", "-fvisibility=hidden", "-ffp-contract=off",
                      "-Wall", "-Wextra", "-Wno-unused-parameter",
                      "-Wno-missing-field-initializers", "-Wno-cast-function-type",
                      "-Werror=implicit-function-declaration"]

setup(
    ext_modules=[
        Extension(
            "myatt._myatt",
            # the glue in csrc/, the kernels in csrc/kernels/<family>/; a kernel
            # includes another family's header by its path from csrc/kernels
            # ("runtime/threads.h"), the glue by its path from csrc ("kernels/...")
            sources=sorted(glob.glob("csrc/*.c")
                           + glob.glob("csrc/kernels/**/*.c", recursive=True)),
            include_dirs=[numpy.get_include(), "csrc", "csrc/kernels"],
            depends=sorted(glob.glob("csrc/*.h")
                           + glob.glob("csrc/kernels/**/*.h", recursive=True)),
            # the oldest NumPy we run on (pyproject's dependency): its C API, whichever
            # NumPy 2.x builds the wheel (2.0-2.2 default to an older one, without
            # PyDataMem_SetHandler)
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_23_API_VERSION"),
                           ("NPY_TARGET_VERSION", "NPY_1_23_API_VERSION")],
            extra_compile_args=extra_compile_args,
        )
    ],
)
