"""Build synet and prove from the disassembly that each CPU level's code stays inside that level.

    python tools/check_baseline.py              # builds into a temporary folder
    python tools/check_baseline.py --keep DIR   # ... and leaves the build in DIR

The extension modules' own code and the baseline kernels must use nothing above x86-64-v2, the avx2
kernels nothing above x86-64-v3 (no AVX-512). It reads the object files of the build, one per level.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Mnemonics (objdump AT&T, lower case) that need more than each level allows.
SSE3_TO_SSE42 = r"(pshufb|palign|phadd|phsub|pmaddubs|pmulhrs|psign|pabs|pmulld|pminsd|pmaxsd|pminud|pmaxud|pminsb|" \
                r"pmaxsb|pminuw|pmaxuw|ptest|pblend|blendp|blendvp|roundp|rounds|pextr[bdq]|pinsr[bdq]|extractps|" \
                r"insertps|pmovsx|pmovzx|packusdw|pcmpeqq|pcmpgtq|pcmp[ei]str|crc32|dpp[sd]|mpsadbw|movntdqa|" \
                r"phminposuw|haddp|hsubp|addsubp|movddup|movs[hl]dup|lddqu)"
POPCNT = r"(popcnt)"
V3_SCALAR = r"(lzcnt|tzcnt|andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|movbe)\b"
FORBIDDEN = {
    "x86-64": [r"%ymm", r"%zmm", r"%k[0-7]", r"^v[a-z]", rf"^{SSE3_TO_SSE42}", rf"^{POPCNT}", rf"^{V3_SCALAR}"],
    "x86-64-v2": [r"%ymm", r"%zmm", r"%k[0-7]", r"^v[a-z]", rf"^{V3_SCALAR}"],
    "x86-64-v3": [r"%zmm", r"%k[0-7]", r"%[xy]mm(1[6-9]|2[0-9]|3[01])\b", r"\{%k",
                  r"^v(pternlog|pmov(us|s)?(db|dw|qb|qd|qw|wb)\b|pmov[bwdq]2m|pmovm2|permt2|permi2|"
                  r"cvtt?p[sd]2u|cvtu|rcp14|rsqrt14|scalef|getexp|getmant|fixupimm|range|reduce|dbpsadbw|"
                  r"pcompress|pexpand|compress|expand|pconflict|plzcnt|dpbf16|cvtne2?ps2bf16|dpbusd|dpwssd|"
                  r"popcnt|pshufbitqmb|gf2p8|pmultishift|alignd|alignq|extract[if]64|insert[if]64|broadcast[if]64|"
                  r"broadcast[if]32x[48]|shuf[if]|pabsq|pmaxsq|pminsq|pmaxuq|pminuq|pmullq|psraq|psrav[wq]|psllvw|"
                  r"psrlvw|cvtqq2|cvtuqq2|cvtp[sd]2u?qq|fpclass|kmov|ktest|kortest)"],
}


def forbidden_instructions(shared_object: str, level: str) -> list[str]:
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", shared_object], capture_output=True, text=True,
                          check=True).stdout
    patterns = [re.compile(p) for p in FORBIDDEN[level]]
    found = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0].strip().endswith(":"):
            continue
        instruction = parts[-1].strip()
        if any(p.search(instruction) for p in patterns):
            found.append(f"{os.path.basename(shared_object)}: {parts[0].strip()} {instruction}")
    return found


def build(into: str) -> str:
    """Builds the extensions in a copy of the checkout under `into`; returns its build_temp folder."""
    source = os.path.join(into, "src")
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns("build", "dist", "*.so", "_*.c", "capi.c", ".git",
                                                                "*.egg-info"))
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=source, check=True,
                   stdout=subprocess.DEVNULL)
    return glob.glob(os.path.join(source, "build", "temp*"))[0]


def objects_by_level(temp: str) -> dict[str, list[str]]:
    """{x86-64 level name: object files that must stay inside it}."""
    modules = glob.glob(os.path.join(temp, "synet", "*.o"))
    levels = os.path.join(temp, "levels")
    return {
        "x86-64-v2": modules + glob.glob(os.path.join(levels, "baseline", "**", "*.o"), recursive=True),
        "x86-64-v3": glob.glob(os.path.join(levels, "avx2", "**", "*.o"), recursive=True),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", metavar="DIR", help="build here and keep it")
    args = parser.parse_args()
    folder = args.keep or tempfile.mkdtemp(prefix="synet-levels-")
    os.makedirs(folder, exist_ok=True)
    temp = build(folder)
    total = 0
    for level, objects in objects_by_level(temp).items():
        found = [hit for obj in sorted(objects) for hit in forbidden_instructions(obj, level)]
        for hit in found[:40]:
            print(hit)
        print(f"{level}: {len(objects)} object files, {len(found)} instructions above the level")
        total += len(found) + (0 if objects else 1)
    print(f"{total} instructions above their level")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
