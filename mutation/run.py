"""`make mutation`: a mutation score for the pure core, and every survivor answered.

The idea: mutmut changes the core's code one small edit at a time (``<`` for ``<=``, ``1`` for
``0``, a ``return`` of ``None``…) and runs the fast tests that cover the edited function; a
mutant no test notices is a *survivor*. Each survivor must be answered, by a test that asserts
what a user would notice, or by an entry in ``mutation/equivalents.toml`` saying why the edit
cannot change behaviour.

mutmut 3 only finds code under ``./``, ``src/`` or ``source/``, and ours lives under
``operator/``; so the sources, the tests and the CRD the tests read are mirrored into a staging
directory outside git (``$IMAGEREFRESH_CACHE/mutation/<checkout>/stage``) and mutmut runs there.
Files are copied only when their content changed, so mutmut's own cache (a verdict is kept
while its function's source is unchanged) survives between runs. mutmut does not notice test
changes, so this script does (see :func:`invalidate`): a changed or new test file retests the
functions it covers, a change to a module outside its plain functions retests that module, and a
change under ``tests/support/`` or to a ``conftest.py`` retests everything. ``--fresh`` throws
the cache away.

mutmut 3 leaves some code alone: decorated functions (``@property``, pydantic validators; only
a lone ``@staticmethod``/``@classmethod`` is mutated), class bodies and module-level code
(``Field(ge=1)``, constants, regular expressions), type annotations, ``len``/``isinstance``
calls. The report lists what it skipped among the core's code, so a skipped guard is never
mistaken for a killed one.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
EQUIVALENTS = HERE / "equivalents.toml"
# Pinned in pyproject.toml's `mutation` extra: its .meta files and diffs are read here.
MUTMUT_VERSION = "3.8.1"

# The pure core, as paths under operator/imagerefresh/.
CORE = (
    "planner/",
    "rollout.py",
    "reference.py",
    "ratelimit.py",
    "credentials.py",
    "registry/auth.py",
    "models/",
    "audit/",
    "kube/namespaces.py",
    "signatures/",
    "offline.py",
)
# The fast tests that cover it: no cluster, no registry process.
TESTS = (
    "tests/planner/",
    "tests/test_rollout.py",
    "tests/test_reference.py",
    "tests/test_ratelimit.py",
    "tests/test_credentials.py",
    "tests/models/",
    "tests/registry/test_registry_auth.py",
    "tests/test_audit.py",
    "tests/test_audit_offline.py",
    "tests/kube/test_kube_namespaces.py",
    "tests/signatures/",
    "tests/test_offline.py",
)
MARKERS = "not cluster and not registry"
# The pytest plugin that makes property tests few and fixed (see hypothesis_profile.py).
PLUGIN = "plugins/hypothesis_profile.py"

# mutmut's exit codes per mutant (mutmut/stats.py), folded into what the report needs.
KILLED_CODES = {1, 3}
STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    None: "not checked",
}


def status_of(code: int | None) -> str:
    return STATUS.get(code, "suspicious")


# --- staging ---------------------------------------------------------------------------------


def cache_dir() -> Path:
    base = Path(os.environ.get("IMAGEREFRESH_CACHE", Path.home() / ".cache" / "imagerefresh"))
    checkout = hashlib.sha256(str(REPO).encode()).hexdigest()[:12]
    return base / "mutation" / checkout


def _sync_file(source: Path, target: Path, content: bytes | None = None) -> bool:
    """Copy ``source`` (or write ``content``) to ``target`` only if it differs: mtimes matter."""
    data = source.read_bytes() if content is None else content
    if target.exists() and target.read_bytes() == data:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return True


def _sync_tree(source: Path, target: Path, suffixes: tuple[str, ...]) -> None:
    wanted = {
        path.relative_to(source)
        for path in source.rglob("*")
        if path.is_file() and path.suffix in suffixes and "__pycache__" not in path.parts
    }
    for relative in wanted:
        _sync_file(source / relative, target / relative)
    if target.exists():
        for path in target.rglob("*"):
            if path.is_file() and path.relative_to(target) not in wanted:
                path.unlink()


def mutmut_config() -> str:
    only = [f"src/imagerefresh/{p}*" if p.endswith("/") else f"src/imagerefresh/{p}" for p in CORE]
    selection = ["-m", MARKERS, *(t for t in TESTS if (REPO / t).exists())]
    return "\n".join(
        [
            "",
            "[tool.mutmut]",
            'source_paths = ["src/"]',
            f"only_mutate = {json.dumps(only)}",
            f"pytest_add_cli_args_test_selection = {json.dumps(selection)}",
            'pytest_add_cli_args = ["-p", "hypothesis_profile", "-p", "no:cacheprovider"]',
            'also_copy = ["crds/", "e2e/"]',
            "use_git_change_detection = false",
            "",
        ]
    )


def stage(stage_dir: Path) -> None:
    _sync_tree(REPO / "operator" / "imagerefresh", stage_dir / "src" / "imagerefresh", (".py",))
    _sync_tree(REPO / "tests", stage_dir / "tests", (".py",))
    # tests/support imports e2e's helpers (the real node's image builder) at collection.
    _sync_tree(REPO / "e2e", stage_dir / "e2e", (".py",))
    _sync_tree(REPO / "crds", stage_dir / "crds", (".yaml",))
    _sync_file(HERE / "hypothesis_profile.py", stage_dir / PLUGIN)
    pyproject = (REPO / "pyproject.toml").read_text() + mutmut_config()
    _sync_file(REPO / "pyproject.toml", stage_dir / "pyproject.toml", pyproject.encode())
    # mutmut copies tests/ over its own copy but never deletes; a deleted test must go too.
    copied = stage_dir / "mutants" / "tests"
    if copied.exists():
        for path in copied.rglob("*.py"):
            if not (stage_dir / path.relative_to(stage_dir / "mutants")).exists():
                path.unlink()
    # Nor does it forget a module that moved or went (audit.py became audit/): its mutants and
    # their verdicts would be reported against a source that no longer has their functions.
    mutated = stage_dir / "mutants" / "src"
    if mutated.exists():
        for path in [*mutated.rglob("*.py"), *mutated.rglob("*.py.meta")]:
            source = stage_dir / path.relative_to(stage_dir / "mutants")
            if not source.with_name(source.name.removesuffix(".meta")).exists():
                path.unlink()


# --- invalidation when tests change ----------------------------------------------------------


def content_hashes(stage_dir: Path) -> dict[str, str]:
    """What each staged file's verdicts depend on beyond mutmut's per-function hashes.

    A test file counts whole. A source file counts by its code outside undecorated function
    bodies (module and class level, decorated functions): mutmut already retests a function
    whose own source changed, but not its neighbours when a constant or a property changes.
    """
    hashes = {}
    for path in [*sorted((stage_dir / "tests").rglob("*.py")), stage_dir / PLUGIN]:
        hashes[str(path.relative_to(stage_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    for path in sorted((stage_dir / "src").rglob("*.py")):
        skeleton = ast.dump(_without_function_bodies(ast.parse(path.read_text())))
        hashes[str(path.relative_to(stage_dir))] = hashlib.sha256(skeleton.encode()).hexdigest()
    return hashes


def _without_function_bodies(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.decorator_list:
            node.body = [ast.Pass()]
    return tree


def _meta_files(stage_dir: Path) -> list[Path]:
    return sorted((stage_dir / "mutants" / "src").rglob("*.py.meta"))


def function_of(mutant: str) -> str:
    """``imagerefresh.x.x_f__mutmut_3`` → ``imagerefresh.x.x_f`` (mutmut's stats key)."""
    return mutant.partition("__mutmut_")[0]


def readable_function(mutant: str) -> str:
    """``…x_plan__mutmut_3`` → ``plan``; ``…xǁSpecǁcheck__mutmut_1`` → ``Spec.check``."""
    mangled = function_of(mutant).rpartition(".")[2]
    if mangled.startswith("x_"):
        return mangled[2:]
    return ".".join(part for part in mangled.split("ǁ")[1:])


def _covering(stats_path: Path) -> dict[str, set[str]]:
    """Which test files cover each function, from mutmut's stats."""
    if not stats_path.exists():
        return {}
    stats = json.loads(stats_path.read_text())
    return {
        function: {test.split("::")[0] for test in tests}
        for function, tests in stats["tests_by_mangled_function_name"].items()
    }


def collect_coverage(stage_dir: Path, log_path: Path) -> bool:
    """Have mutmut collect which tests cover which function again, with the changed tests.

    ``mutmut print-time-estimates`` collects stats without running a mutant; it needs the
    tests in mutmut's copy and the mutated sources importable (``mutmut run`` does both itself).
    """
    for path in (stage_dir / "tests").rglob("*.py"):
        _sync_file(path, stage_dir / "mutants" / path.relative_to(stage_dir))
    (stage_dir / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    python_path = f"{stage_dir / 'mutants' / 'src'}{os.pathsep}{stage_dir / 'plugins'}"
    with log_path.open("w") as log:
        process = subprocess.run(
            [str(Path(sys.executable).with_name("mutmut")), "print-time-estimates"],
            cwd=stage_dir,
            env=dict(os.environ, PYTHONPATH=python_path),
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    return process.returncode == 0


def invalidate(stage_dir: Path, old: dict[str, str], new: dict[str, str]) -> str:
    """Mark for retesting the verdicts a change of tests or sources could have made wrong.

    mutmut itself retests a mutant when its function's source changed. Beyond that: a survivor
    is retested when a changed or new test file covers its function now or did before (a new
    test may kill it); a kill when a test file that covered its function changed or went (it
    may have been the killer); everything when tests/support/, a conftest.py or the pytest
    plugin changed; a whole module when its code outside plain functions changed.
    """
    changed = {path for path in old.keys() | new.keys() if old.get(path) != new.get(path)}
    if not changed:
        return "tests and sources unchanged since the last run"
    tests_changed = {path for path in changed if path.startswith("tests/")}
    modules_changed = {
        path.removeprefix("src/").removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        for path in changed - tests_changed
        if path.startswith("src/")
    }
    stats_path = stage_dir / "mutants" / "mutmut-stats.json"
    before = _covering(stats_path)
    after: dict[str, set[str]] = {}
    shared = any(
        p.startswith("tests/support/") or p.endswith("conftest.py") or p == PLUGIN for p in changed
    )
    if tests_changed and not shared:
        if collect_coverage(stage_dir, stage_dir.parent / "coverage.log"):
            after = _covering(stats_path)
        else:
            shared = True  # coverage unknown: retest everything rather than guess
    reset = 0
    for meta_path in _meta_files(stage_dir):
        meta = json.loads(meta_path.read_text())
        codes = meta["exit_code_by_key"]
        module = module_of(meta_path, stage_dir)
        for mutant, code in codes.items():
            if code is None:
                continue
            function = function_of(mutant)
            # A kill can only be undone by a test that was there and changed; anything else
            # may be killed by a test that covers its function now.
            covered_by = before.get(function, set())
            if code not in KILLED_CODES:
                covered_by = covered_by | after.get(function, set())
            if shared or module in modules_changed or covered_by & tests_changed:
                codes[mutant] = None
                reset += 1
        meta_path.write_text(json.dumps(meta, indent=4))
    return (
        f"{len(tests_changed)} test file(s) and {len(modules_changed)} module(s) changed: "
        f"{reset} verdict(s) to test again"
    )


# --- running ---------------------------------------------------------------------------------


def run_mutmut(stage_dir: Path, max_children: int, log_path: Path, only: list[str]) -> int:
    env = dict(os.environ, PYTHONPATH=str(stage_dir / "plugins"))
    mutmut = Path(sys.executable).with_name("mutmut")
    with log_path.open("w") as log:
        process = subprocess.run(
            [str(mutmut), "run", "--max-children", str(max_children), *only],
            cwd=stage_dir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    return process.returncode


# --- reading the results ---------------------------------------------------------------------


@dataclass
class Mutant:
    name: str
    module: str  # imagerefresh.planner.target
    status: str
    function: str = ""
    line: int = 0
    original: str = ""  # the mutated line(s) as written, stripped
    mutated: str = ""  # the same line(s) after the mutation, stripped
    answer: str = ""  # the equivalents entry's reason, when one matches


@dataclass
class Equivalent:
    module: str
    line: str
    mutant: str
    reason: str
    matched: list[Mutant] = field(default_factory=list)


def module_of(meta_path: Path, stage_dir: Path) -> str:
    relative = meta_path.relative_to(stage_dir / "mutants" / "src")
    return str(relative).removesuffix(".py.meta").replace("/", ".").removesuffix(".__init__")


def read_mutants(stage_dir: Path) -> list[Mutant]:
    mutants = []
    for meta_path in _meta_files(stage_dir):
        module = module_of(meta_path, stage_dir)
        meta = json.loads(meta_path.read_text())
        for name, code in meta["exit_code_by_key"].items():
            mutants.append(Mutant(name=name, module=module, status=status_of(code)))
    return mutants


def describe(mutants: list[Mutant], stage_dir: Path) -> None:
    """Fill in the line each unkilled mutant changes, from mutmut's own diff."""
    os.chdir(stage_dir)  # mutmut reads its configuration from the working directory
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    for mutant in mutants:
        if mutant.status == "killed":
            continue
        source = Path("src") / (mutant.module.replace(".", "/") + ".py")
        if not source.exists():
            source = Path("src") / mutant.module.replace(".", "/") / "__init__.py"
        diff = get_diff_for_mutant(mutant.name, path=source).splitlines()
        removed = [line[1:].strip() for line in diff[2:] if line.startswith("-")]
        added = [line[1:].strip() for line in diff[2:] if line.startswith("+")]
        mutant.original = " / ".join(removed)
        mutant.mutated = " / ".join(added)
        mutant.function = readable_function(mutant.name)
        mutant.line = _line_number(source, mutant.function, removed[0] if removed else "")


def _line_number(source: Path, function: str, text: str) -> int:
    """The line of ``text`` inside ``function`` in the original source (0 when not found)."""
    lines = source.read_text().splitlines()
    name = function.rpartition(".")[2]
    start = next(
        (i for i, line in enumerate(lines) if line.lstrip().startswith(f"def {name}(")),
        0,
    )
    for number in range(start, len(lines)):
        if text and lines[number].strip() == text:
            return number + 1
    return start + 1


def load_equivalents() -> list[Equivalent]:
    if not EQUIVALENTS.exists():
        return []
    entries = tomllib.loads(EQUIVALENTS.read_text()).get("equivalent", [])
    return [
        Equivalent(entry["module"], entry["line"], entry["mutant"], entry["reason"])
        for entry in entries
    ]


def answer(mutants: list[Mutant], equivalents: list[Equivalent]) -> list[Equivalent]:
    """Match equivalents to mutants; return the entries that match a *killed* mutant."""
    wrong = []
    for entry in equivalents:
        for mutant in mutants:
            if (mutant.module, mutant.original, mutant.mutated) == (
                entry.module,
                entry.line,
                entry.mutant,
            ):
                entry.matched.append(mutant)
                mutant.answer = entry.reason
    for entry in equivalents:
        if any(m.status in ("killed", "timeout") for m in entry.matched):
            wrong.append(entry)
    return wrong


# --- what mutmut leaves alone ----------------------------------------------------------------


def _decorators(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [ast.unparse(d) for d in node.decorator_list]


# Calls that build values, not rules: their lines decide nothing a test could check.
_NOT_RULES = {"field", "get_logger", "MappingProxyType", "token_bytes"}


def _is_rule(node: ast.Assign | ast.AnnAssign) -> bool:
    """An assignment mutmut skips that decides something: a limit, a pattern, a constraint.

    Left out: names, enum members, empty defaults (None, (), "", False, 0), type aliases, and
    values built by calls that decide nothing (dataclass ``field``, loggers).
    """
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if any(isinstance(t, ast.Name) and t.id in ("__all__", "log") for t in targets):
        return False
    parts = [node.value] if node.value is not None else []
    if isinstance(node, ast.AnnAssign):
        parts.append(node.annotation)
    for part in parts:
        for sub in ast.walk(part):
            if isinstance(sub, ast.Call):
                func = sub.func
                name = func.attr if isinstance(func, ast.Attribute) else ast.unparse(func)
                if name not in _NOT_RULES:
                    return True
            elif isinstance(sub, ast.Compare | ast.BoolOp):
                return True
    value = node.value
    if isinstance(value, ast.Constant):
        if isinstance(value.value, bool):
            return value.value is True
        if isinstance(value.value, int | float):
            return value.value != 0
        if isinstance(value.value, str):
            return any(c in value.value for c in "[](){}^$*+?\\")
    return isinstance(value, ast.JoinedStr)


def _is_enum(node: ast.ClassDef) -> bool:
    return any(ast.unparse(base).rpartition(".")[2].endswith("Enum") for base in node.bases)


def unmutated(source_root: Path) -> list[str]:
    """Code among the core's guards that mutmut 3 does not mutate, one line each."""
    found = []
    for relative in _core_files(source_root):
        path = source_root / relative
        tree = ast.parse(path.read_text())
        where = f"{relative}"
        for node in tree.body:
            found.extend(_unmutated_in(node, where, owner=""))
    return found


def _unmutated_in(node: ast.stmt, where: str, owner: str) -> list[str]:
    found = []
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        decorators = _decorators(node)
        if decorators and decorators not in (["staticmethod"], ["classmethod"]):
            found.append(
                f"{where}:{node.lineno} {owner}{node.name} — decorated (@{', @'.join(decorators)})"
            )
    elif isinstance(node, ast.ClassDef) and not _is_enum(node):
        for child in node.body:
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.extend(_unmutated_in(child, where, owner=f"{owner}{node.name}."))
            elif isinstance(child, ast.Assign | ast.AnnAssign) and _is_rule(child):
                text = ast.unparse(child).splitlines()[0]
                found.append(f"{where}:{child.lineno} {owner}{node.name} — class body: {text[:90]}")
    elif isinstance(node, ast.Assign | ast.AnnAssign) and _is_rule(node):
        text = ast.unparse(node).splitlines()[0]
        found.append(f"{where}:{node.lineno} module level: {text[:90]}")
    return found


def _core_files(source_root: Path) -> list[str]:
    files = []
    for entry in CORE:
        if entry.endswith("/"):
            # With its subpackages (planner/target/), as mutmut's only_mutate glob takes them.
            files.extend(
                str(p.relative_to(source_root)) for p in sorted((source_root / entry).rglob("*.py"))
            )
        else:
            files.append(entry)
    return files


def pragmas_without_reason(source_root: Path) -> list[str]:
    """``# pragma: no mutate`` must carry its reason beside it (``… no mutate: why``)."""
    bad = []
    for relative in _core_files(source_root):
        for number, line in enumerate((source_root / relative).read_text().splitlines(), 1):
            if "pragma: no mutate" in line:
                reason = line.partition("no mutate")[2].strip(" :-—").strip()
                if reason in ("", "block", "start", "end"):
                    bad.append(f"{relative}:{number}: {line.strip()}")
    return bad


# --- the report ------------------------------------------------------------------------------


# What a verdict settles: a kill (a timeout is one: the tests noticed, by never ending), or
# nothing run yet. Every other status is a survivor to answer.
_DECIDED = ("killed", "timeout", "not checked")


def report(
    mutants: list[Mutant],
    equivalents: list[Equivalent],
    wrong: list[Equivalent],
    skipped: list[str],
    bad_pragmas: list[str],
) -> tuple[str, int]:
    lines = ["", "Mutation score per module (killed / (mutants - equivalent))", ""]
    by_module: dict[str, Counter[str]] = {}
    for mutant in mutants:
        counts = by_module.setdefault(mutant.module, Counter())
        counts[mutant.status] += 1
        if mutant.answer and mutant.status not in _DECIDED:
            counts["equivalent"] += 1
    header = f"{'module':38} {'mutants':>7} {'killed':>6} {'surv.':>5} {'equiv.':>6} {'other':>5}"
    header += f" {'score':>6}"
    lines.append(header)
    totals: Counter[str] = Counter()
    for module in sorted(by_module):
        counts = by_module[module]
        totals.update(counts)
        lines.append(_row(module, counts))
    lines.append(_row("all", totals))

    unanswered = [m for m in mutants if m.status not in _DECIDED and not m.answer]
    lines += ["", f"Survivors without an answer: {len(unanswered)}"]
    for mutant in sorted(unanswered, key=lambda m: (m.module, m.line)):
        label = "" if mutant.status == "survived" else f" [{mutant.status}]"
        lines.append(
            f"  {mutant.module}:{mutant.line} {mutant.function}{label}\n"
            f"      - {mutant.original}\n      + {mutant.mutated}"
        )
    timeouts = sorted(m.name for m in mutants if m.status == "timeout")
    if timeouts:
        lines.append(
            f"\nTimed out, counted as killed: {len(timeouts)} (a loaded machine can time out a "
            "survivor: retest each with --only NAME on an idle one)"
        )
        lines += [f"  {name}" for name in timeouts]
    unchecked = sum(1 for m in mutants if m.status == "not checked")
    if unchecked:
        lines.append(f"\nNot checked yet (run interrupted?): {unchecked}")

    answered = [e for e in equivalents if e.matched and e not in wrong]
    stale = [e for e in equivalents if not e.matched]
    lines += ["", f"Equivalents list: {len(equivalents)} entries, {len(answered)} matched"]
    for entry in stale:
        lines.append(
            f"  STALE (matches no mutant): {entry.module}: {entry.line!r} -> {entry.mutant!r}"
        )
    for entry in wrong:
        lines.append(
            f"  NOT EQUIVALENT (a test kills it; remove the entry): {entry.module}: "
            f"{entry.line!r} -> {entry.mutant!r}"
        )
    for pragma in bad_pragmas:
        lines.append(f"  PRAGMA WITHOUT A REASON: {pragma}")

    lines += ["", f"Not mutated by mutmut 3 (held to no test by this run): {len(skipped)}"]
    lines += [f"  {entry}" for entry in skipped]
    problems = len(unanswered) + len(stale) + len(wrong) + len(bad_pragmas)
    return "\n".join(lines), problems


def _row(module: str, counts: Counter[str]) -> str:
    total = sum(v for k, v in counts.items() if k != "equivalent")
    killed = counts["killed"] + counts["timeout"]
    equivalent = counts["equivalent"]
    survived = counts["survived"]
    other = total - killed - survived - counts["not checked"]
    judged = total - equivalent - counts["not checked"]
    score = f"{100 * killed / judged:5.1f}%" if judged else "    -"
    return f"{module:38} {total:7} {killed:6} {survived:5} {equivalent:6} {other:5} {score:>6}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-children", type=int, default=1, help="mutmut workers (default 1)")
    parser.add_argument("--fresh", action="store_true", help="throw the cached results away")
    parser.add_argument("--report-only", action="store_true", help="report the cached results")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GLOB",
        help="retest only these mutants (mutmut names, e.g. 'imagerefresh.planner.guard.*'); "
        "quick to check a new test, and leaves every other verdict and the cache as they are",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 on an unanswered survivor or a stale entry"
    )
    args = parser.parse_args()

    cache = cache_dir()
    stage_dir = cache / "stage"
    fingerprint = {"mutmut": MUTMUT_VERSION, "python": sys.version.split()[0]}
    fingerprint_path = cache / "fingerprint.json"
    if args.fresh or (
        fingerprint_path.exists() and json.loads(fingerprint_path.read_text()) != fingerprint
    ):
        shutil.rmtree(stage_dir, ignore_errors=True)
    stage_dir.mkdir(parents=True, exist_ok=True)
    fingerprint_path.write_text(json.dumps(fingerprint))

    if not args.report_only:
        stage(stage_dir)
        log_path = cache / "mutmut.log"
        hashes_path = cache / "contents.json"
        old = json.loads(hashes_path.read_text()) if hashes_path.exists() else {}
        new = content_hashes(stage_dir)
        if args.only:
            print("mutation: retesting only " + ", ".join(args.only))
        elif (stage_dir / "mutants").exists():
            print(f"mutation: {invalidate(stage_dir, old, new)}", flush=True)
        if not args.only:
            # The resets are in mutmut's files now: an interrupted run resumes where it stopped.
            hashes_path.write_text(json.dumps(new, indent=1))
        print(f"mutation: mutmut {MUTMUT_VERSION} in {stage_dir} (log: {log_path})", flush=True)
        started = time.monotonic()
        code = run_mutmut(stage_dir, args.max_children, log_path, args.only)
        elapsed = time.monotonic() - started
        print(f"mutation: mutmut exited {code} after {elapsed:.0f} s")
        if code != 0:
            print(log_path.read_text()[-4000:])
            print("mutation: mutmut failed; the log above says why")
            return 1

    mutants = read_mutants(stage_dir)
    if not mutants:
        print("mutation: no results yet; run without --report-only")
        return 1
    describe(mutants, stage_dir)
    equivalents = load_equivalents()
    wrong = answer(mutants, equivalents)
    source_root = REPO / "operator" / "imagerefresh"
    text, problems = report(
        mutants, equivalents, wrong, unmutated(source_root), pragmas_without_reason(source_root)
    )
    print(text)
    (cache / "report.txt").write_text(text + "\n")
    print(f"\nmutation: report saved to {cache / 'report.txt'}")
    return 1 if args.strict and problems else 0


if __name__ == "__main__":
    sys.exit(main())
