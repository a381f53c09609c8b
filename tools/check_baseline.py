"""Build synet for a portable CPU level and prove from the disassembly that it stays inside it.

    python tools/check_baseline.py x86-64-v3      # or x86-64, x86-64-v2, x86-64-v4

Builds the extensions with SYNET_CPU_BASELINE=<level> into a temporary folder, disassembles
every shared object with objdump, and fails if an instruction above the level appears.
With --keep DIR the portable build is left in DIR (to benchmark it).
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
    "x86-64-v3": [r"%zmm", r"%k[0-7]", r"%[xy]mm(1[6-9]|2[0-9]|3[01])\b", r"\{%k", r"^v(pternlog|pmov(us|s)?(db|dw|qb|qd|qw|wb)\b|pmov[bwdq]2m|pmovm2|permt2|permi2|"
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


def build(level: str, into: str) -> list[str]:
    source = os.path.join(into, "src")
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns("build", "dist", "*.so", "*.c", ".git", "*.egg-info"))
    env = dict(os.environ, SYNET_CPU_BASELINE=level)
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=source, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return sorted(glob.glob(os.path.join(source, "synet", "*.so")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("level", choices=sorted(FORBIDDEN))
    parser.add_argument("--keep", metavar="DIR", help="build here and keep it")
    args = parser.parse_args()
    folder = args.keep or tempfile.mkdtemp(prefix="synet-baseline-")
    os.makedirs(folder, exist_ok=True)
    objects = build(args.level, folder)
    found = [hit for so in objects for hit in forbidden_instructions(so, args.level)]
    for hit in found[:40]:
        print(hit)
    print(f"{len(objects)} extension modules built for {args.level}: "
          f"{len(found)} instructions above the baseline")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if found or not objects else 0


if __name__ == "__main__":
    sys.exit(main())
