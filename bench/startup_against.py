"""Start-up of this checkout against another build of the operator, alternated on one cluster.

The start-up row (CPU seconds from exec to the first tick done, ``--leader-elect``, the edge's
policy) moves with the machine as much as with the code: the same import took a third longer
on one evening than on the morning before. So a change is judged here against its base in one
run: the bench's environment comes up once, the edge and its policy are applied, and the
operator of the bench's runtime virtualenv (this checkout) and of ``BENCH_AGAINST`` (a
virtualenv with another checkout installed, e.g. ``python -m venv V && V/bin/pip install -e
WORKTREE``) are started in turn, ``BENCH_ROUNDS`` times each, each on a Lease of its own so none
waits for another's to expire, next to a bare kopf operator's start (the floor).

    BENCH_AGAINST=/tmp/base-venv .venv/bin/python bench/startup_against.py
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import run as bench_run
from harness import Environment, OperatorRun, cpu_seconds, note, wait_for


def main() -> int:
    against = Path(os.environ["BENCH_AGAINST"])
    rounds = int(os.environ.get("BENCH_ROUNDS", "4"))
    config = bench_run.Config()
    env = Environment(config.state)
    cluster = env.up()
    bench = bench_run.Bench(config, env, cluster)
    edge = [(bench_run.EDGE_CP, "control-plane")]
    try:
        bench.setup()
        for image in bench_run.EDGE_IMAGES:
            bench.digests[image] = bench.push(f"tracebloc/{image}", f"{image}-0")
        control_plane, agents = bench_run.edge_workloads(bench.front.host, bench.digests)
        bench.apply(bench_run.EDGE_CP, control_plane)
        bench.apply(bench_run.EDGE_AGENTS, agents)
        namespaces = [bench_run.EDGE_CP, bench_run.EDGE_AGENTS]
        wait_for(lambda: bench.settled(namespaces), "the edge workloads", 180)
        assert bench.operator is not None
        before = bench.operator.ticks()
        bench.apply(bench_run.EDGE_CP, [bench_run.edge_policy(bench.front.host)])
        bench.operator.wait_ticks(before, edge)
        bench.operator.stop()
        bench.operator = None
        venvs = {"this checkout": bench.venv, str(against): against}
        cpu: dict[str, list[float]] = {name: [] for name in [*venvs, "bare kopf"]}
        for round_ in range(rounds):
            cpu["bare kopf"].append(bench._bare_startup())
            for index, (name, venv) in enumerate(venvs.items()):
                lease = f"against-{index}-{round_}"
                run = OperatorRun.start(
                    cluster,
                    env.registry,
                    bench.front,
                    config.logs / f"{lease}.log",
                    namespaces,
                    pairs=[f"{bench_run.EDGE_CP}={bench_run.EDGE_AGENTS}"],
                    window=bench_run.WINDOW,
                    venv=venv,
                    extra_args=(
                        "--leader-elect",
                        f"--leader-election-namespace={bench_run.EDGE_CP}",
                        f"--leader-election-id={lease}",
                        f"--leader-election-identity={lease}",
                    ),
                )
                run.wait_ticks({}, edge, timeout=120, poll=0.05)
                cpu[name].append(cpu_seconds(run.pid))
                run.stop()
                note(f"round {round_ + 1}: {name} {cpu[name][-1]:.2f} CPU-s")
        for name, figures in cpu.items():
            listed = ", ".join(f"{f:.2f}" for f in figures)
            print(f"{name}: median {statistics.median(figures):.2f} CPU-s ({listed})")
        return 0
    finally:
        bench.close()
        env.down()


if __name__ == "__main__":
    sys.exit(main())
