"""What XLA's CPU backend does with int8 and bfloat16 matrix products at the decoder's shapes (issue 65, item 1).

    python -m benchmarks.quantized_dot --sets 512,vocab,1024 --perf --out DIR   # ~10 min on 2 cores
    python -m benchmarks.quantized_dot --quick --out DIR                        # a smoke run, seconds

One decoding step's products, `x @ W` with `x` of `rows` = 1, 4, 8, 32 (greedy
one sentence, beam 4, the engine's default batch, a beam batch) and `W` of
(512, 512) (attention), (512, 2048), (2048, 512) (feed-forward), (512, 65001)
(opus-mt-es-en's output projection), optionally 1024 wide, each a `jax.jit`
program in five forms (`FORMS`): float32; bfloat16 (activations cast in the
graph) with float32 accumulation; int8 weights with per-output-channel scales,
dequantized in the graph, the scale after or before the product; int8 weights
times per-row dynamically quantized int8 activations, accumulated in int32.
Each form is compiled under `COMPILERS`: XLA's default (in jaxlib 0.10 a
matrix-matrix dot is a YNNPACK library call, a vector-matrix one, rows 1, XLA's
LLVM code), YNNPACK's wider fusions (converts and scales inside the library
call), and no library (XLA's own dot). A product alone, not in the decoder's
while loop, where XLA may hoist a weight's convert out of the loop.

Timing: the weights rotate through copies totalling `--stream-mib` (a step of
the base decoder reads ~85 MB of layer weights and 133 MB of output projection,
more than a CPU's cache), every form
is warmed up, then the repeats run round-robin over the forms of one shape (one
of each before the next of any); a repeat is ~`--sample-ms` of back-to-back
calls, and the table gives its median microseconds per product (a call's
dispatch included: "dispatch floor" is a jitted `x + 1`). The error is
max |y - y64| / max |y64| against the float64 product of the float32 weights.

What XLA emits: the optimized HLO of every program says where each `dot` runs
and on what element types, and which `convert`s feed it; `--out` dumps the
programs of the first shape (`xla_dump_to`) and counts the vector instructions of its
LLVM-emitted code (`objdump`); `--perf` samples each form with `perf record`
and disassembles the hottest matrix kernel (`perf annotate`), e.g. whether it
is VNNI (`vpdpbusd`), AVX512_BF16 (`vdpbf16ps`) or widening plus `vfmadd`.
"""

import argparse
import collections
import importlib.util
import json
import math
import os
import pathlib
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

from benchmarks.report import save_results

SHAPE_SETS = {
    "512": [(512, 512), (512, 2048), (2048, 512)],
    "vocab": [(512, 65001)],
    "1024": [(1024, 1024), (1024, 4096), (4096, 1024)],
}
ROWS = (1, 4, 8, 32)
FORMS = {
    "f32": "float32 x @ W (the baseline)",
    "bf16": "bf16(x) @ bf16 W, float32 accumulation (dot_general preferred_element_type=f32)",
    "w8_scale_after": "(x @ f32(W_int8)) * scale: int8 weights, per-output-channel scale",
    "w8_scale_before": "x @ (f32(W_int8) * scale)",
    "w8a8": "int8(x / row scale) @ W_int8 -> int32 (preferred_element_type=int32), then * row scale * scale",
}
# compiler_options of each compilation (xla.DebugOptions fields, jaxlib 0.10).
COMPILERS = {
    "default": {},
    "ynn-fusions": {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_ELTWISE"},
    "no-library": {"xla_cpu_experimental_ynn_fusion_type": ""},
}
# The CPU flags that decide which int8 / bf16 instructions exist.
ISA_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8",
             "amx_bf16")
# Mnemonics (prefixes) that tell how a kernel multiplies.
KEY_INSTRUCTIONS = ("vpdpbusd", "vpdpwssd", "vpdpbssd", "vdpbf16ps", "tdpb", "vpmaddubsw", "vpmaddwd", "vpmovsxbw",
                    "vpmovsxbd", "vpmulld", "vcvtdq2ps", "vpslld", "vfmadd", "vmulps", "vcvtneps2bf16")
LIBRARY_KINDS = {"__ynn_fusion": "YNNPACK", "__xnn_fusion": "XNNPACK", "__onednn_fusion": "oneDNN"}
KERNEL = re.compile(r"dot|gemm|gebp|gemv|matmul|dequantize", re.I)


def describe_machine():
    """The CPU (`keras_transformer.machine`, loaded by path so that Keras is not imported) and its ISA flags."""
    path = pathlib.Path(__file__).resolve().parents[1] / "keras_transformer" / "machine.py"
    spec = importlib.util.spec_from_file_location("_kt_machine", path)
    machine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(machine)
    flags = machine.cpu_flags()
    return dict(cpu=machine.describe_cpu(), isa_flags=[flag for flag in ISA_FLAGS if flag in flags],
                lacking=[flag for flag in ISA_FLAGS if flag not in flags], cores=os.cpu_count())


def quantize(w):
    """Per-output-channel symmetric int8: `(W_int8, scale)` with W ~= W_int8 * scale."""
    import numpy as np

    scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / 127.0
    return np.clip(np.rint(w / scale), -127, 127).astype(np.int8), scale.astype(np.float32)


def form_functions():
    """`{form: f(x, *weights)}`, each taking float32 activations `(rows, K)`."""
    import jax
    import jax.numpy as jnp

    contract = (((1,), (0,)), ((), ()))

    def w8a8(x, w, scale):
        row_scale = jnp.maximum(jnp.max(jnp.abs(x), axis=1, keepdims=True), 1e-12) / 127.0
        xq = jnp.clip(jnp.round(x / row_scale), -127, 127).astype(jnp.int8)
        acc = jax.lax.dot_general(xq, w, contract, preferred_element_type=jnp.int32)
        return acc.astype(jnp.float32) * row_scale * scale

    return {
        "f32": lambda x, w: x @ w,
        "bf16": lambda x, w: jax.lax.dot_general(x.astype(jnp.bfloat16), w, contract,
                                                 preferred_element_type=jnp.float32),
        "w8_scale_after": lambda x, w, scale: (x @ w.astype(jnp.float32)) * scale,
        "w8_scale_before": lambda x, w, scale: x @ (w.astype(jnp.float32) * scale),
        "w8a8": w8a8,
    }


def weight_bytes(form, k, n):
    """The bytes of weights (and scales) a product reads."""
    return {"f32": 4 * k * n, "bf16": 2 * k * n}.get(form, k * n + 4 * n)


_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(?P<name>[\w.\-]+) = (?P<type>\S+) (?P<op>[\w\-]+)\((?P<args>[^)]*)\)"
                          r"(?P<rest>.*)$")
_COMPUTATION = re.compile(r"^(?:ENTRY )?%(?P<name>[\w.\-]+) \(.*\{$")


def _describe_type(type_text, roles):
    dims = re.search(r"\[([\d,]*)\]", type_text)
    count = math.prod(int(d) for d in dims[1].split(",") if d) if dims else None
    return type_text.split("[", 1)[0].lstrip("(") + (f" {roles[count]}" if count in roles else "")


def describe_hlo(text, roles=None):
    """Where each `dot` of an optimized HLO module runs, on which types, and the `convert`s around it.

    Args:
        text: `compiled.as_text()`.
        roles: `{element count: name}` to name arrays by (e.g. `{K * N: "W"}`).

    Returns:
        dict: `dots` (e.g. `"s8 x x s8 W -> s32 in YNNPACK"`), `converts`
        (e.g. `"s8 W -> f32 W in a loop fusion"`), `custom_calls` (targets)
        and `summary` (one line).

    Example:

    >>> describe_hlo('''ENTRY %main (a: f32[2,3], b: s8[3,4]) -> f32[2,4] {
    ...   %a = f32[2,3]{1,0} parameter(0)
    ...   %b = s8[3,4]{1,0} parameter(1)
    ...   %c = f32[3,4]{1,0} convert(%b)
    ...   ROOT %d = f32[2,4]{1,0} dot(%a, %c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
    ... }''', roles={12: "W"})["summary"]
    'dot f32 x f32 W -> f32 in XLA; convert s8 W -> f32 W in the entry'
    """
    roles = roles or {}
    instructions, computation, callers = {}, None, {}
    for line in text.splitlines():
        header = _COMPUTATION.match(line)
        if header:
            computation = header["name"]
            continue
        match = _INSTRUCTION.match(line)
        if match:
            instructions[match["name"]] = dict(match.groupdict(), computation=computation)
            for called in re.findall(r"(?:calls|to_apply)=%([\w.\-]+)", match["rest"]):
                callers[called] = match["name"]

    def place(name):
        caller = instructions.get(callers.get(instructions[name]["computation"]))
        if caller is None:
            return "the entry" if instructions[name]["op"] != "dot" else "XLA"
        kind = re.search(r'"kind":"(__\w+)"', caller["rest"])
        if kind:
            return LIBRARY_KINDS.get(kind[1], kind[1])
        loop = re.search(r"kind=k(\w+)", caller["rest"])
        return f"a {loop[1].lower()} fusion" if loop else caller["op"]

    def operand(argument):
        found = instructions.get(argument.strip().lstrip("%"))
        return _describe_type(found["type"], roles) if found else "?"

    dots = [" x ".join(operand(a) for a in i["args"].split(",")) + f" -> {_describe_type(i['type'], roles)} "
            f"in {place(name)}" for name, i in instructions.items() if i["op"] == "dot"]
    converts = [f"{operand(i['args'])} -> {_describe_type(i['type'], roles)} in {place(name)}"
                for name, i in instructions.items() if i["op"] == "convert"]
    calls = sorted({m for i in instructions.values() if i["op"] == "custom-call"
                    for m in re.findall(r'custom_call_target="([^"]+)"', i["rest"])})
    summary = "; ".join([f"dot {d}" for d in dots] + [f"convert {c}" for c in converts]
                        + [f"custom-call {c}" for c in calls])
    return dict(dots=dots, converts=converts, custom_calls=calls, summary=summary)


def count_instructions(mnemonics):
    """`{key instruction: count}` over a list of mnemonics, plus the widest vector register used."""
    counts = {key: sum(m.startswith(key) for m in mnemonics) for key in KEY_INSTRUCTIONS}
    return {key: value for key, value in counts.items() if value}


def disassemble_objects(folder):
    """Key instructions of the LLVM-emitted object files XLA dumped into `folder` (None without objdump)."""
    if not shutil.which("objdump"):
        return None
    found = {}
    for path in sorted(pathlib.Path(folder).glob("*.o")):
        text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)], capture_output=True,
                              text=True).stdout
        mnemonics = [line.split("\t")[1].split()[0] for line in text.splitlines() if line.count("\t") >= 1
                     and re.match(r"^\s+[0-9a-f]+:\t", line)]
        registers = sorted({r for r in ("xmm", "ymm", "zmm") if f"%{r}" in text})
        found[path.name.split("obj-file.")[-1]] = dict(count_instructions(mnemonics), registers=registers)
    return found


def profile_kernel(call, seconds, scratch):
    """Samples `call()` looped for `seconds` with `perf record`; the hottest symbols and the kernel's instructions.

    Returns:
        dict: `top` ([percent, symbol]), `kernel` (the hottest matrix-product
        symbol), `instructions` (its key instructions, static counts),
        `hot` (its mnemonics with >= 2 % of its samples); or `{"error": why}`.
    """
    data = os.path.join(scratch, "perf.data")
    try:
        recorder = subprocess.Popen(["perf", "record", "-q", "-F", "997", "-o", data, "-p", str(os.getpid())],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except OSError as error:
        return {"error": f"perf: {error}"}
    time.sleep(0.3)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        call()
    recorder.send_signal(signal.SIGINT)
    _, err = recorder.communicate(timeout=120)
    if recorder.returncode not in (0, -signal.SIGINT) or not os.path.exists(data):
        return {"error": f"perf record failed: {err.strip()[-300:]}"}
    report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "dso,symbol"], capture_output=True,
                            text=True, timeout=300).stdout
    shares = collections.Counter()
    for m in re.finditer(r"^\s+([\d.]+)%\s+(.+?)\s+\[[.k]\]\s+(.+?)\s*(?:-\s+-\s*)?$", report, re.M):
        jit = m[2].startswith("[JIT]") or m[2].startswith("perf-")  # anonymous code has no symbols: one entry
        shares["[JIT] code (XLA's, or oneDNN's gemm)" if jit else m[3].strip()] += float(m[1])
    top = [(round(p, 1), symbol) for symbol, p in shares.most_common(8)]
    kernel = next((symbol for _, symbol in top if KERNEL.search(symbol)), None)
    result = dict(top=top, kernel=kernel)
    if kernel:
        annotated = subprocess.run(["perf", "annotate", "-i", data, "--stdio", "-s", kernel], capture_output=True,
                                   text=True, timeout=300).stdout
        rows = [(float(m[1]), m[2]) for m in re.finditer(r"^\s*([\d.]+)\s*:\s+[0-9a-f]+:\s+([a-z][\w.]*)", annotated,
                                                          re.M)]
        hot = collections.Counter()
        for percent, mnemonic in rows:
            hot[mnemonic] += percent
        result.update(instructions=count_instructions([m for _, m in rows]),
                      hot={m: round(p, 1) for m, p in hot.most_common() if p >= 2.0})
    os.remove(data)
    return result


def time_group(entries, repeats, sample_seconds):
    """Times `entries` (dicts with `call(i)`) round-robin; adds `us_repeats` and `cpu_us_repeats` to each."""
    for entry in entries:  # warm-up, then calls per repeat for ~sample_seconds
        for i in range(3):
            entry["call"](i).block_until_ready()
        start, calls = time.perf_counter(), max(entry["copies"], 3)
        for i in range(calls):
            out = entry["call"](i)
        out.block_until_ready()
        each = (time.perf_counter() - start) / calls
        entry.update(calls_per_repeat=int(min(max(1, math.ceil(sample_seconds / max(each, 1e-7))), 100_000)),
                     us_repeats=[], cpu_us_repeats=[], next=0)
    for _ in range(repeats):
        for entry in entries:
            calls = entry["calls_per_repeat"]
            wall, cpu = time.perf_counter(), time.process_time()
            for i in range(entry["next"], entry["next"] + calls):
                out = entry["call"](i)
            out.block_until_ready()
            entry["us_repeats"].append(1e6 * (time.perf_counter() - wall) / calls)
            entry["cpu_us_repeats"].append(1e6 * (time.process_time() - cpu) / calls)
            entry["next"] += calls


def run(args):
    import jax
    import jax.numpy as jnp
    import numpy as np

    functions, rng = form_functions(), np.random.default_rng(0)
    shapes = [shape for name in args.sets for shape in SHAPE_SETS[name]]
    baseline = "default" if "default" in args.compilers else args.compilers[0]
    results, groups, hlo_seen, dumps, kernels = [], [], {}, {}, {}
    perf_at = args.perf_at if args.perf_at[1:] in [list(s) for s in shapes] else [args.rows[0], *shapes[0]]
    scratch = tempfile.mkdtemp(prefix="quantized-dot-")
    for k, n in shapes:
        w = (rng.standard_normal((k, n), dtype=np.float32) / np.sqrt(k)).astype(np.float32)
        w8, scale = quantize(w)
        w64 = w.astype(np.float64)
        host = {"f32": (w,), "bf16": (w.astype(jnp.bfloat16),), "w8": (w8, scale)}
        weights = {}
        for key, arrays in host.items():  # distinct device copies, read in turn, --stream-mib in all
            copies = max(1, min(256, math.ceil(args.stream_mib * 2**20 / sum(a.nbytes for a in arrays))))
            weights[key] = [tuple(jax.device_put(a) for a in arrays) for _ in range(copies)]
        for rows in args.rows:
            x_host = rng.standard_normal((rows, k), dtype=np.float32)
            reference = x_host.astype(np.float64) @ w64
            x = jax.device_put(x_host)
            floor = jax.jit(lambda a: a + 1).lower(x).compile()
            entries = [dict(form="dispatch floor", copies=1, call=lambda i, f=floor: f(x))]
            for compiler in args.compilers:
                for form in args.forms:
                    copies = weights[form if form in ("f32", "bf16") else "w8"]
                    lowered = jax.jit(functions[form]).lower(x, *copies[0])
                    options = dict(COMPILERS[compiler])
                    dump = os.path.join(scratch, "dump", compiler, form, f"rows{rows}")
                    dumped = args.out and (k, n) == shapes[0]
                    if dumped:
                        options.update(xla_dump_to=dump, xla_dump_hlo_as_text=True)
                    compiled = lowered.compile(compiler_options=options or None)
                    if dumped:
                        dumps[(compiler, form, rows)] = dict(at=[rows, k, n], objects=disassemble_objects(dump))
                        shutil.copytree(dump, os.path.join(args.out, "xla_dump", compiler, form, f"rows{rows}"),
                                        dirs_exist_ok=True)
                    y = np.asarray(compiled(x, *copies[0]), dtype=np.float64)
                    hlo = describe_hlo(compiled.as_text(), roles={k * n: "W"})
                    hlo_seen.setdefault((compiler, form), {}).setdefault(hlo["summary"], []).append([rows, k, n])
                    entries.append(dict(
                        compiler=compiler, form=form, rows=rows, k=k, n=n, copies=len(copies),
                        weight_bytes=weight_bytes(form, k, n), hlo=hlo,
                        max_error=float(np.abs(y - reference).max() / np.abs(reference).max()),
                        rms_error=float(np.linalg.norm(y - reference) / np.linalg.norm(reference)),
                        call=lambda i, c=compiled, ws=copies: c(x, *ws[i % len(ws)])))
                    if args.perf and [rows, k, n] == perf_at and (compiler, form) not in kernels:
                        kernels[(compiler, form)] = dict(at=perf_at, **profile_kernel(
                            lambda c=compiled, ws=copies[0]: c(x, *ws).block_until_ready(), args.perf_seconds,
                            scratch))
            time_group(entries, args.repeats, args.sample_ms / 1000)
            floor_entry, timed = entries[0], entries[1:]
            base = next(e for e in timed if e["compiler"] == baseline and e["form"] == "f32") \
                if "f32" in args.forms else None
            for entry in timed:
                entry.pop("call")
                entry.pop("next")
                entry["median_us"] = statistics.median(entry["us_repeats"])
                entry["cpu_median_us"] = statistics.median(entry["cpu_us_repeats"])
                entry["ratio_to_f32"] = entry["median_us"] / base["median_us"] if base else None
                results.append(entry)
            groups.append(dict(rows=rows, k=k, n=n, floor_us_repeats=floor_entry["us_repeats"],
                               floor_median_us=statistics.median(floor_entry["us_repeats"])))
            print(f"rows {rows:2d} x ({k}, {n}): " + ", ".join(
                f"{e['compiler']}/{e['form']} {e['median_us']:.0f} us" for e in timed), flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return dict(
        meta=dict(settings=vars(args), machine=describe_machine(), jax=jax.__version__,
                  jaxlib=importlib.import_module("jaxlib").__version__, platform=jax.default_backend(),
                  xla_flags=os.environ.get("XLA_FLAGS", ""), load_average=os.getloadavg(), forms=FORMS,
                  compilers=COMPILERS, baseline=baseline, error="max |y - y64| / max |y64|"),
        results=results, groups=groups,
        hlo={f"{c}/{f}": seen for (c, f), seen in hlo_seen.items()},
        dumps={f"{c}/{f}/rows{r}": value for (c, f, r), value in dumps.items()},
        kernels={f"{c}/{f}": value for (c, f), value in kernels.items()},
    )


def markdown(report):
    """The report's tables: timings per shape and rows, then what XLA emitted per form."""
    meta, settings = report["meta"], report["meta"]["settings"]
    machine = meta["machine"]
    lines = [
        "# int8 and bf16 matrix products on XLA's CPU backend ("
        + ("QUICK smoke run, not a measurement)" if settings["quick"] else "measurement)"),
        "",
        f"{machine['cpu']}; flags {', '.join(machine['isa_flags']) or 'none'}; lacking "
        f"{', '.join(machine['lacking']) or 'none'}. jax {meta['jax']}, jaxlib {meta['jaxlib']}; "
        f"XLA_FLAGS `{meta['xla_flags'] or '(none)'}`; threads: XLA's default. {settings['repeats']} repeats of "
        f"~{settings['sample_ms']} ms, round-robin, after a warm-up; weights rotate through copies of "
        f"{settings['stream_mib']} MiB; load average at the end {', '.join(f'{v:.1f}' for v in meta['load_average'])}.",
        "",
        f"Median microseconds per product (a call's dispatch included; CPU us: the process's CPU time, all "
        f"threads); \"vs f32\": over `{meta['baseline']}`'s "
        f"float32 at the same shape; error: {meta['error']}.",
        "",
        "| rows | K x N | dispatch floor us | compiler | form | us | CPU us | vs f32 | weight MB | max error |",
        "|---:|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    floors = {(g["rows"], g["k"], g["n"]): g["floor_median_us"] for g in report["groups"]}
    for r in sorted(report["results"], key=lambda r: (r["k"], r["n"], r["rows"])):
        ratio = "n/a" if r["ratio_to_f32"] is None else f"{r['ratio_to_f32']:.2f}x"
        lines.append(f"| {r['rows']} | {r['k']} x {r['n']} | {floors[(r['rows'], r['k'], r['n'])]:.0f} | "
                     f"{r['compiler']} | `{r['form']}` | {r['median_us']:,.0f} | {r['cpu_median_us']:,.0f} | "
                     f"{ratio} | {r['weight_bytes'] / 1e6:.2f} | {r['max_error']:.1e} |")
    lines += ["", "## What the optimized HLO keeps (at which rows)", "",
              "W: the weights (K x N elements). A dot \"in XLA\" is XLA's own: LLVM-emitted where the dump has "
              "an object file named after it, else a library its runtime calls (`perf` below; on jaxlib 0.10 f32 "
              "went to oneDNN's JIT-generated sgemm, as ONEDNN_VERBOSE=all shows, s32 to Eigen). A convert in a "
              "loop fusion or the entry writes its result to memory (a W-sized one: the converted weights are "
              "written, then read by the dot); one in YNNPACK is the library's.", "",
              "| compiler | form | optimized HLO |", "|---|---|---|"]
    for key, seen in report["hlo"].items():
        compiler, form = key.split("/")
        lines.append(f"| {compiler} | `{form}` | " + "<br>".join(
            f"{summary} (rows {', '.join(str(r) for r in sorted({at[0] for at in where}))})"
            for summary, where in seen.items()) + " |")
    if report["dumps"]:
        lines += ["", "## LLVM-emitted code (`xla_dump_to`, objdump): key instructions per object file", "",
                  "| compiler | form | at rows, K, N | object files: instructions |", "|---|---|---|---|"]
        for key, dump in report["dumps"].items():
            objects = dump["objects"]
            text = "objdump not found" if objects is None else "<br>".join(
                f"{name}: {json.dumps(counts)}" for name, counts in objects.items()) or "none (no LLVM-emitted code)"
            compiler, form, _ = key.split("/")
            lines.append(f"| {compiler} | `{form}` | {dump['at']} | {text} |")
    if report["kernels"]:
        lines += ["", "## The kernel that ran (`perf record`, `perf annotate`)", "",
                  "| compiler | form | at rows, K, N | hottest symbols (%) | matrix kernel | its key instructions "
                  "(static count) | hot mnemonics (% of its samples) |", "|---|---|---|---|---|---|---|"]
        for key, found in report["kernels"].items():
            if "error" in found:
                lines.append(f"| {key.replace('/', ' | `')}` | {found['at']} | {found['error']} | | | |")
                continue
            top = "<br>".join(f"{p:.0f} {s[:70]}" for p, s in found["top"][:4])
            lines.append(f"| {key.replace('/', ' | `')}` | {found['at']} | {top} | `{found['kernel']}` | "
                         f"{json.dumps(found.get('instructions', {}))} | {json.dumps(found.get('hot', {}))} |")
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="write results.json, results.md and xla_dump/ here")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: rows 1 and 4, the 512 set, 3 repeats of ~2 ms")
    parser.add_argument("--repeats", type=int, help="(default: 7; --quick: 3)")
    parser.add_argument("--sample-ms", type=float, help="the length of a repeat (default: 30; --quick: 2)")
    parser.add_argument("--rows", type=lambda s: [int(v) for v in s.split(",")], help="(default: 1,4,8,32)")
    parser.add_argument("--sets", type=lambda s: s.split(","), default=["512", "vocab"],
                        help=f"weight shapes, of {','.join(SHAPE_SETS)} (default: 512,vocab)")
    parser.add_argument("--forms", type=lambda s: s.split(","), default=list(FORMS), help="(default: all)")
    parser.add_argument("--compilers", type=lambda s: s.split(","), default=list(COMPILERS),
                        help="(default: all: %(default)s)")
    parser.add_argument("--stream-mib", type=float, default=64.0,
                        help="weight copies per form read in turn, so they come from memory (default: %(default)s)")
    parser.add_argument("--perf", action="store_true", help="find the kernel that ran with perf record/annotate")
    parser.add_argument("--perf-at", type=lambda s: [int(v) for v in s.split(",")], default=[4, 512, 2048],
                        help="rows,K,N of the --perf runs (default: 4,512,2048)")
    parser.add_argument("--perf-seconds", type=float, default=1.0)
    args = parser.parse_args(argv)
    args.repeats = args.repeats or (3 if args.quick else 7)
    args.sample_ms = args.sample_ms or (2.0 if args.quick else 30.0)
    args.rows = args.rows or ([1, 4] if args.quick else list(ROWS))
    if args.quick:
        args.sets, args.stream_mib = ["512"], min(args.stream_mib, 16.0)
    for name, values, known in (("--sets", args.sets, SHAPE_SETS), ("--forms", args.forms, FORMS),
                                ("--compilers", args.compilers, COMPILERS)):
        if set(values) - set(known):
            parser.error(f"{name}: unknown {sorted(set(values) - set(known))}; known: {', '.join(known)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    report = run(args)
    table = markdown(report)
    if args.out:
        save_results(report, table, args.out)
    print(table)
    return report


if __name__ == "__main__":
    main()
