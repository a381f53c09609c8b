"""CPU dispatch: every level gives the same bits, SYNET_MAX_ISA caps the level, and the baseline really
is the baseline (the package imports and runs on emulated CPUs without AVX2 / AVX-512: qemu-user)."""

import json
import os
import platform
import shutil
import subprocess
import sys

import numpy as np
import pytest

import synet
from synet._kernels import LEVELS

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "levels_probe.py")
X86 = platform.machine() == "x86_64"
SUPPORTED = synet.config()["dispatch"]["supported"]


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


CPU_FLAGS = _cpu_flags()


def run_python(code_or_args, env=None, prefix=(), timeout=600):
    args = list(prefix) + [sys.executable] + (["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args)
    return subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, **(env or {})), timeout=timeout,
                          cwd=HERE)


def dispatch_under(level):
    result = run_python("import json, synet; print(json.dumps(synet.config()['dispatch']))", {"SYNET_MAX_ISA": level})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_config_reports_the_levels():
    dispatch = synet.config()["dispatch"]
    assert set(dispatch) >= {"compiled", "supported", "cap", "chosen", "ops"}
    assert dispatch["supported"] in LEVELS
    assert dispatch["chosen"].split()[0] in LEVELS
    for op, level in dispatch["ops"].items():
        assert level in dispatch["compiled"][op]
        assert LEVELS.index(level) <= LEVELS.index(dispatch["chosen"].split()[0])
    assert "baseline" in dispatch["compiled"]["deconvolution"]


@pytest.mark.parametrize("level", LEVELS)
def test_max_isa_caps_the_level(level):
    dispatch = dispatch_under(level)
    assert dispatch["cap"] == level
    chosen = min(LEVELS.index(level), LEVELS.index(SUPPORTED))
    assert dispatch["chosen"].split()[0] == LEVELS[chosen]
    for _op, op_level in dispatch["ops"].items():
        assert LEVELS.index(op_level) <= chosen


def test_unknown_max_isa_warns_with_the_valid_names():
    result = run_python("import synet; print(synet.config()['dispatch']['cap'])", {"SYNET_MAX_ISA": "sse9"})
    assert result.returncode == 0, result.stderr
    assert "SYNET_MAX_ISA='sse9' is not a CPU level" in result.stderr
    assert "baseline, avx2, avx512, avx512_bf16, amx" in result.stderr
    assert result.stdout.split()[-1] == "amx"


def test_contexts_name_their_level():
    conv = synet.ConvParams.deconvolution(8, 4, 4, 8, 2, 2)
    assert synet.config()["dispatch"]["ops"]["deconvolution"] in synet.Deconvolution16b(1, conv).info()
    add = synet.QuantizedAdd([4], "u8", 0.1, 0, [4], "u8", 0.1, 0, "relu", None, "u8", 0.1, 0)
    assert add.kernel.split()[-1] == synet.config()["dispatch"]["ops"]["quantized_add"]
    gather = synet.GatherElements("f32", "i32", False, 1, [1], 2, 1, 2)
    assert gather.level == synet.config()["dispatch"]["ops"]["gather"]


# A seccomp filter that makes Linux refuse AMX (arch_prctl ARCH_REQ_XCOMP_PERM fails with EPERM), as a kernel
# before 5.16 or a sandbox does; installed in the child before synet first asks.
REFUSE_AMX = r"""
import ctypes, struct
LD_ABS, JEQ, RET = 0x20, 0x15, 0x06
ALLOW, EPERM = 0x7FFF0000, 0x00050000 | 1
program = [(LD_ABS, 0, 0, 0),             # the syscall number
           (JEQ, 0, 3, 158),              # arch_prctl, else allow
           (LD_ABS, 0, 0, 16),            # its first argument (low half)
           (JEQ, 0, 1, 0x1023),           # ARCH_REQ_XCOMP_PERM, else allow
           (RET, 0, 0, EPERM), (RET, 0, 0, ALLOW)]
code = b"".join(struct.pack("HBBI", *insn) for insn in program)
buffer = ctypes.create_string_buffer(code, len(code))
class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0                     # PR_SET_NO_NEW_PRIVS
fprog = Program(len(program), ctypes.cast(buffer, ctypes.c_void_p))
assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0   # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
"""


@pytest.mark.skipif(SUPPORTED != "amx" or not X86 or sys.platform != "linux", reason="no AMX on this CPU")
def test_refused_amx_runs_the_next_level_with_the_same_bits():
    """When Linux refuses the tile state, an AMX-sized deconvolution runs off AMX (the vdpbf16ps or the FP32
    micro-kernel, as bf16_dot says), config() says so, and the bits are AMX's."""
    from synet._deconvolution import amx_available
    if not amx_available():
        pytest.skip("Linux refuses AMX here already")
    case = ("import numpy as np, synet\n"
            "rng = np.random.default_rng(7)\n"
            "x = rng.standard_normal((1, 9, 11, 48)).astype(np.float32)\n"
            "w = rng.standard_normal((48, 3, 3, 40)).astype(np.float32)\n"
            "conv = synet.ConvParams.deconvolution(48, 9, 11, 40, 3, 2, 1, 1, format='NHWC')\n"
            "d = synet.Deconvolution16b(1, conv)\n"
            "d.set_params(w, rng.standard_normal(40).astype(np.float32))\n"
            "y = d.forward(x)\n")
    scope: dict = {}
    exec(case, scope)
    assert "amx-bf16" in scope["d"].info()
    result = run_python(REFUSE_AMX + case + "import json\n"
                        "print(json.dumps([d.info(), synet.config()['dispatch'], y.tobytes().hex()]))")
    assert result.returncode == 0, result.stderr
    info, dispatch, bits = json.loads(result.stdout.splitlines()[-1])
    assert dispatch["chosen"] == "avx512_bf16 (AMX refused by the OS)"
    assert info == f"PhaseGemm {'avx512bf16' if dispatch['bf16_dot'] else 'fp32'} [amx]", info
    assert bits == scope["y"].tobytes().hex()


def cpu_vendor() -> str:
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("vendor_id")), "")


@pytest.mark.skipif(LEVELS.index(SUPPORTED) < LEVELS.index("avx512_bf16"), reason="no AVX512-BF16 on this CPU")
@pytest.mark.parametrize("setting", ["", "1", "0", "yes"])
def test_the_bf16_dot_micro_kernel_runs_where_it_is_faster(setting):
    """Off AMX, a deconvolution runs the vdpbf16ps micro-kernel on AMD CPUs (their dot products outpace their
    FMAs) and the FP32 one elsewhere (Intel's run at half their FMAs' rate): by default, or as SYNET_BF16_DOT
    says; another value warns. The AMX micro-kernel is chosen either way."""
    code = ("import json, synet\n"
            "wide, narrow = (synet.Deconvolution16b(1, synet.ConvParams.deconvolution(c, 6, 6, 32, 2, 2)).info()"
            " for c in (32, 8))\n"
            "from synet._deconvolution import amx_available\n"
            "print(json.dumps([wide, narrow, synet.config()['dispatch']['bf16_dot'], amx_available()]))")
    expected = setting == "1" if setting in ("0", "1") else cpu_vendor() == "AuthenticAMD"
    micro = "avx512bf16" if expected else "fp32"
    for level in ("avx512_bf16", SUPPORTED):
        result = run_python(code, {"SYNET_MAX_ISA": level, "SYNET_BF16_DOT": setting})
        assert result.returncode == 0, result.stderr
        wide, narrow, dot, amx = json.loads(result.stdout.splitlines()[-1])
        assert dot == expected
        assert narrow.startswith(f"PhaseGemm {micro} "), narrow   # < 16 input channels: never AMX
        assert wide.startswith(f"PhaseGemm {'amx-bf16' if amx else micro} "), wide
        assert ("SYNET_BF16_DOT='yes': expected 1 or 0 (ignored)" in result.stderr) == (setting == "yes")


def gds_mitigated() -> bool:
    try:
        with open("/sys/devices/system/cpu/vulnerabilities/gather_data_sampling") as f:
            return f.read().startswith("Mitigation")
    except OSError:
        return False


@pytest.mark.skipif(LEVELS.index(SUPPORTED) < LEVELS.index("avx512"), reason="no AVX-512 on this CPU")
@pytest.mark.parametrize("setting", ["", "1", "0", "yes"])
def test_vector_gathers_run_where_they_are_faster(setting):
    """GatherElements' AVX-512 kernels load 4- and 8-byte elements by vpgather on Intel's CPUs (unless Linux
    reports the Downfall microcode, which slows gathers down) and by scalar loads elsewhere (AMD's vpgather
    is slower), or as SYNET_VECTOR_GATHER says; another value warns. Below AVX-512 there is no choice."""
    expected = setting == "1" if setting in ("0", "1") else cpu_vendor() == "GenuineIntel" and not gds_mitigated()
    code = "import json, synet; print(json.dumps(synet.config()['dispatch']['vector_gather']))"
    for level, choice in (("avx2", False), ("avx512", expected), (SUPPORTED, expected)):
        result = run_python(code, {"SYNET_MAX_ISA": level, "SYNET_VECTOR_GATHER": setting})
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout.splitlines()[-1]) == choice, level
        warned = "SYNET_VECTOR_GATHER='yes': expected 1 or 0 (ignored)" in result.stderr
        assert warned == (setting == "yes" and level != "avx2"), result.stderr


@pytest.mark.skipif(LEVELS.index(SUPPORTED) < LEVELS.index("avx512"), reason="no AVX-512 on this CPU")
@pytest.mark.parametrize("setting", ["0", "1"])
def test_gather_tests_pass_with_either_loads(setting):
    """The gather tests of 32-lane blocks (negative, out-of-range and beyond-int32 indices), of grouped slices
    and of threads pass with vpgather and with scalar loads alike (in-process runs take this CPU's choice)."""
    tests = "blocks_of_32_lanes or small_slices_grouped_per_task or bfloat16_raw_bits_and_threads"
    result = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.join(HERE, "test_gather.py"),
                         "-k", tests], {"SYNET_VECTOR_GATHER": setting})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and " failed" not in result.stdout


def run_probe(folder, name, env):
    """(kernel level, results) of tests/levels_probe.py in a subprocess with `env`."""
    path = str(folder / f"{name}.npz")
    result = run_python([PROBE, path], env, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    with np.load(path) as data:
        return str(data["level"]), {k: data[k] for k in data.files if k != "level"}


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    """{level: (kernel level, results)} for every level this CPU supports, each run in a subprocess; on a CPU
    with AVX512-VBMI also "avx512 without vbmi": the AVX-512 code of CPUs without it (Skylake-X, Cascade
    Lake), whose quantized adds run other kernels; on a CPU with AVX512-BF16 the "avx512_bf16" level with
    and without the vdpbf16ps micro-kernel, whichever this CPU runs by default; at "avx512" the gather's
    4- and 8-byte loads the other way than this CPU's default (vpgather or scalar loads)."""
    folder = tmp_path_factory.mktemp("levels")
    found = {level: run_probe(folder, level, {"SYNET_MAX_ISA": level})
             for level in LEVELS[:LEVELS.index(SUPPORTED) + 1]}
    if "avx512" in found and "avx512vbmi" in CPU_FLAGS:
        found["avx512 without vbmi"] = run_probe(folder, "avx512 without vbmi", {
            "SYNET_MAX_ISA": "avx512", "SYNET_DISABLE_CPU_FEATURES": "avx512vbmi"})
    if "avx512" in found:   # GatherElements' other way to load 4- and 8-byte elements
        choice = "0" if synet.config()["dispatch"]["vector_gather"] else "1"
        found[f"avx512 SYNET_VECTOR_GATHER={choice}"] = run_probe(folder, f"avx512 gather {choice}", {
            "SYNET_MAX_ISA": "avx512", "SYNET_VECTOR_GATHER": choice})
    if "avx512_bf16" in found:
        for choice in ("0", "1"):
            found[f"avx512_bf16 SYNET_BF16_DOT={choice}"] = run_probe(folder, f"avx512_bf16 dot {choice}", {
                "SYNET_MAX_ISA": "avx512_bf16", "SYNET_BF16_DOT": choice})
    return found


@pytest.mark.slow
def test_every_level_gives_the_same_bits(probes):
    """All four ops, FP32 and BF16, every activation, both layouts, 1 and 2 threads, at every level the CPU
    supports, AMX included: every deconvolution kernel sums in the AMX tile's order."""
    levels = list(probes)
    reference_level = levels[0]
    reference = probes[reference_level][1]
    assert probes[reference_level][0] == "baseline"
    for level in levels[1:]:
        results = probes[level][1]
        assert results.keys() == reference.keys()
        different = [k for k in reference if not np.array_equal(reference[k], results[k])]
        assert not different, f"{level} differs from {reference_level} on {len(different)} results: {different[:5]}"


OVERFLOW_PROBE = r"""
import sys, numpy as np, synet
big = np.float32(2.0**127)
outputs = []
# depthwise channels last, 24 channels: the last 8 are the scalar tail of AVX-512's 16-lane vectors, a vector
# at AVX2; planar (3 output channels), both layouts; the GEMM (16 output channels): in each, one output sums
# 1.5 * 2^127 and then -2.5 * 2^127 (the second product beyond FP32's range)
for groups, c_in, c_out in ((24, 24, 24), (1, 8, 3), (1, 8, 16)):
    for layout in ("NHWC", "NCHW"):
        x = np.zeros((1, 6, 40, c_in), np.float32)
        x[..., c_in - 4] = big
        w = np.zeros((c_in, 2, 2, c_out // groups), np.float32)
        w[c_in - 4, 0, 0, :], w[c_in - 4, 0, 1, :] = 1.5, -2.5
        if layout == "NCHW":
            x, w = np.ascontiguousarray(x.transpose(0, 3, 1, 2)), np.ascontiguousarray(w.transpose(0, 3, 1, 2))
        outputs.append(synet.conv_transpose2d(x, w, groups=groups, layout=layout).reshape(-1))
# on two threads (the run's parallel path), the big values only in the source's second half, every nonzero weight
# >= 2: a thread that decided on the source's exponents before the other had scanned its half ran the baseline's
# rounded products (-inf) in some calls
x = np.ones((1, 64, 64, 8), np.float32)
x[:, 32:, :, 0] = x[:, 32:, :, 2] = big / 2
w = np.zeros((8, 2, 2, 16), np.float32)
w[0, 0, 0], w[2, 0, 0] = 3.0, -5.0
for _ in range(40):
    outputs.append(synet.conv_transpose2d(x, w, layout="NHWC", n_threads=2).reshape(-1))
np.save(sys.argv[1], np.concatenate(outputs).view(np.uint32))
"""


UNDERFLOW_PROBE = r"""
import sys, ml_dtypes, numpy as np, synet
rng = np.random.default_rng(5)


def tiny(shape):   # BF16 values of both signs from 2^-76 to 2^-60: products below FP32's normal range, sums near it
    m = 1 + rng.integers(0, 128, shape) / 128
    return (np.ldexp(m, rng.integers(-76, -60, shape)) * rng.choice([-1, 1], shape)).astype(np.float32)


outputs = []
# depthwise (24 channels: AVX-512's scalar tail), planar (3 outputs), GEMM (32 outputs; BF16_SOFT: the FP32
# micro-kernel at every level, as the BF16 instructions flush subnormals); FP32 and BF16 sources, both layouts
for groups, c_in, c_out in ((24, 24, 24), (1, 8, 3), (1, 32, 32)):
    for layout in ("NHWC", "NCHW"):
        x, w = tiny((1, 6, 40, c_in)), tiny((c_in, 3, 3, c_out // groups))
        if layout == "NCHW":
            x, w = np.ascontiguousarray(x.transpose(0, 3, 1, 2)), np.ascontiguousarray(w.transpose(0, 3, 1, 2))
        for src_type in (synet.DataType.FLOAT32, synet.DataType.BFLOAT16):
            conv = synet.ConvParams.deconvolution(c_in, 6, 40, c_out, kernel=3, stride=2, group=groups,
                                                  format=layout, src_type=src_type)
            deconv = synet.Deconvolution16b(1, conv, synet.Compatibility.BF16_SOFT)
            deconv.set_params(w)
            src = x if src_type == synet.DataType.FLOAT32 else x.astype(ml_dtypes.bfloat16)
            outputs.append(deconv.forward(src).reshape(-1))
np.save(sys.argv[1], np.concatenate(outputs).view(np.uint32))
"""


def probe_levels(tmp_path, probe, levels):
    """{level: the probe's output bits} from a subprocess at each level."""
    results = {}
    for level in levels:
        path = tmp_path / f"{level}.npy"
        result = run_python(["-c", probe, str(path)], {"SYNET_MAX_ISA": level})
        assert result.returncode == 0, result.stderr[-3000:]
        results[level] = np.load(path)
    return results


def test_levels_agree_where_products_overflow(tmp_path):
    """Products beyond FP32's range: every level gives the fma's bits, the scalar tails of vector loops too (an fma
    keeps the product a rounded one loses: 1.5 * 2^127 - 2.5 * 2^127 is -2^127, with the product rounded first
    -inf); the baseline, without FMA instructions, by its float64 products."""
    levels = LEVELS[:LEVELS.index(SUPPORTED) + 1]
    if len(levels) < 2:
        pytest.skip("needs two CPU levels")
    results = probe_levels(tmp_path, OVERFLOW_PROBE, levels)
    values = results[levels[-1]].view(np.float32)
    assert (values == np.float32(-(2.0**127))).sum() >= 6 * 200 + 40 * 32 * 64   # every case has the fma's sums
    for level in levels[:-1]:
        assert np.array_equal(results[level], results[levels[-1]]), f"{level} differs from {levels[-1]}"


def test_fp32_levels_agree_where_products_underflow(tmp_path):
    """Products below FP32's normal range (subnormal or less), summed near it: every level's FP32 kernels give
    the fma's bits, the baseline by its float64 products (a product rounded to FP32's subnormal grid and then
    added rounds twice)."""
    levels = LEVELS[:LEVELS.index(SUPPORTED) + 1]
    if len(levels) < 2:
        pytest.skip("needs two CPU levels")
    results = probe_levels(tmp_path, UNDERFLOW_PROBE, levels)
    values = results[levels[-1]].view(np.float32)
    assert ((values != 0) & (np.abs(values) < np.float32(2.0**-120))).mean() > 0.5   # sums near the normal range
    for level in levels[:-1]:
        assert np.array_equal(results[level], results[levels[-1]]), f"{level} differs from {levels[-1]}"


# ---------------------------------------------------------------------------------------------
# Emulated CPUs: the baseline really is the baseline

SMOKE = r"""
import numpy as np, synet, ml_dtypes
d = synet.config()["dispatch"]
x = np.linspace(-3, 3, 1000, dtype=np.float32)
assert np.array_equal(synet.float32_to_bfloat16(x).view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))
data = np.arange(60, dtype=np.float32).reshape(3, 20)
idx = np.array([[0, 19, -1], [5, 4, 3], [1, 1, 1]])
assert np.array_equal(synet.gather_elements(data, idx, 1), np.take_along_axis(data, idx % 20, 1))
a = np.arange(256, dtype=np.uint8)
q = synet.quantized_add(a, a[::-1].copy(), a_scale=0.01, a_zero=47, b_scale=0.02, b_zero=30, dst_scale=0.015,
                        dst_zero=38)
ref = np.clip(np.rint(((a - 47.0) * 0.01 + (a[::-1] - 30.0) * 0.02) / 0.015) + 38, 0, 255)
assert (np.abs(q.astype(int) - ref) <= 1).all()
w = np.ones((4, 2, 2, 2), np.float32)
y = synet.conv_transpose2d(np.ones((1, 4, 3, 3), np.float32), w, stride=2)
assert y.shape == (1, 2, 6, 6) and (y == 4).all()
y = synet.conv_transpose2d(np.ones((1, 4, 3, 3), np.float32), w, stride=2, groups=4)   # depthwise-like groups
print("LEVEL", d["chosen"], d["ops"]["deconvolution"])
"""


def qemu():
    """The qemu-x86_64 binary, installing Debian's qemu-user when possible; else pytest.skip with the reason."""
    found = shutil.which("qemu-x86_64")
    if found:
        return found
    if not shutil.which("apt-get"):
        pytest.skip("qemu-user is not installed and apt-get is not available")
    if os.geteuid() != 0:
        pytest.skip("qemu-user is not installed and installing it needs root")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "install", "-y", "-q", "qemu-user"], ["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "qemu-user"]):
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if cmd[1] == "install" and result.returncode == 0:
            break
    found = shutil.which("qemu-x86_64")
    if not found:
        pytest.skip(f"could not install qemu-user: {result.stderr[-500:]}")
    return found


@pytest.mark.skipif(not X86, reason="x86-64 emulation")
@pytest.mark.skipif(bool(os.environ.get("SYNET_SANITIZED")),
                    reason="qemu-user cannot run an interpreter with the sanitizer runtimes preloaded")
@pytest.mark.parametrize("cpu, level", [("Nehalem", "baseline"), ("Haswell", "avx2")])
def test_runs_on_an_emulated_cpu(cpu, level):
    """x86-64-v2 (Nehalem) and AVX2 (Haswell) CPUs: import and one call of every op; an instruction the
    emulated CPU lacks would end the process with SIGILL."""
    # OpenBLAS (in NumPy) honours OPENBLAS_CORETYPE, which this host may set to its own core: point it at
    # the emulated one, or NumPy itself would run instructions the emulated CPU lacks; no cap on synet's level
    # (a SYNET_MAX_ISA of the caller's would hide the CPU's)
    result = run_python(SMOKE, {"OPENBLAS_CORETYPE": cpu.upper(), "SYNET_MAX_ISA": "amx"}, prefix=[qemu(), "-cpu", cpu],
                        timeout=900)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    chosen = [line for line in result.stdout.splitlines() if line.startswith("LEVEL")][-1].split()
    assert chosen[1:] == [level, level]
