"""The parts of ``ddprof launch``'s capture one at a time: the step rule with several optimizers, the
``--step-on`` hook, the bootstrap's chaining to a site's own ``sitecustomize``, and failures that must not
stop the job."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from ddprof.collectors import autocapture
from ddprof.collectors.bootstrap import bootstrap_env, write_bootstrap
from ddprof.collectors.launch import launch

from ddprof.errors import UsageError


class Counting(autocapture.Agent):
    """An agent whose step boundaries are only counted (no profiler)."""

    def __init__(self, run_dir, step_on=None):
        super().__init__({"run_dir": str(run_dir), "profile": {}, "step_on": step_on})
        self.boundaries = 0

    def boundary(self) -> None:
        self.boundaries += 1


class Opt:  # the optimizer hook only needs an object it can hold weakly
    pass


@pytest.fixture(autouse=True)
def fresh_process_claims(monkeypatch):
    """Each test's agents run as in a fresh process: no ``ddprof.profile`` entered before. A process keeps
    its claims for life (one capture per process), and earlier tests in this pytest process made some."""
    from ddprof.collectors import layout

    monkeypatch.setattr(layout, "_claims", {})


def test_one_optimizer_ends_a_step_at_each_of_its_steps(tmp_path):
    agent, a = Counting(tmp_path), Opt()
    for _ in range(4):
        agent._optimizer_stepped(a, (), {})
    assert agent.boundaries == 4


def test_two_optimizers_end_one_step_per_iteration_after_the_last_to_appear(tmp_path):
    agent, a, b = Counting(tmp_path), Opt(), Opt()
    ends = []
    for _ in range(4):  # iterations: A.step(), B.step()
        for opt in (a, b):
            agent._optimizer_stepped(opt, (), {})
            ends.append(agent.boundaries)
    # A's first step ends step 0 (B unknown yet); from then on B's steps end the steps
    assert ends == [1, 1, 1, 2, 2, 3, 3, 4]


def test_step_on_wraps_a_function_of_a_module_imported_later(tmp_path, monkeypatch):
    (tmp_path / "mytrainer.py").write_text(textwrap.dedent('''
        class Trainer:
            def train_step(self, x):
                """One step."""
                return x + 1
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    agent = Counting(tmp_path / "run", step_on="mytrainer:Trainer.train_step")
    agent.arm(eager_status=False)
    try:
        import mytrainer

        trainer = mytrainer.Trainer()
        assert [trainer.train_step(i) for i in range(3)] == [1, 2, 3]
        assert agent.boundaries == 3
        assert mytrainer.Trainer.train_step.__doc__ == "One step."
    finally:
        sys.meta_path.remove(agent._hooks)
        sys.modules.pop("mytrainer", None)


def test_step_on_must_name_an_importable_function(tmp_path):
    for bad in ("train_step", "__main__:train_step", "mod:"):
        with pytest.raises(UsageError, match="--step-on"):
            launch(tmp_path / "run", [sys.executable, "-c", "pass"], step_on=bad)


def test_the_bootstrap_runs_the_sites_own_sitecustomize_and_writes_only_in_the_run_dir(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['SITE_CUSTOMIZED'] = 'yes'\n")
    run_dir = tmp_path / "run"
    config = write_bootstrap(run_dir, profile={}, step_on=None)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)}
    env |= bootstrap_env(run_dir, config, env)
    assert env["PYTHONPATH"].split(":") == [str(run_dir / ".bootstrap"), str(site)]
    out = subprocess.run([sys.executable, "-c", "import os, sys; print(os.environ.get('SITE_CUSTOMIZED'), "
                          "'ddprof.collectors.autocapture' in sys.modules, 'torch' in sys.modules)"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["yes", "True", "False"]  # ours, then the site's; torch not imported
    (status,) = (run_dir / ".ddprof" / "status").glob("*.json")
    got = json.loads(status.read_text())
    assert (got["steps_seen"], got["exit"]["how"], got["rank"]) == (0, "exited normally", None)


def test_a_broken_bootstrap_leaves_the_job_running(tmp_path):
    run_dir = tmp_path / "run"
    config = write_bootstrap(run_dir, profile={}, step_on=None)
    env = {"PATH": "/usr/bin:/bin"} | bootstrap_env(run_dir, config, {})
    env[autocapture.CONFIG_ENV] = str(tmp_path / "missing.json")
    out = subprocess.run([sys.executable, "-c", "print('trained')"], env=env, capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, "trained\n")
    assert "ddprof: capture is not installed in this process (FileNotFoundError" in out.stderr


def test_an_unwritable_run_dir_turns_capture_off_and_training_goes_on(tmp_path, caplog):
    torch = pytest.importorskip("torch")
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    agent = autocapture.Agent({"run_dir": str(blocker / "run"), "step_on": None,
                               "profile": {"ingest": False, "flight_recorder": False}})
    param = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([param], lr=0.1)
    for _ in range(5):
        param.grad = torch.ones(2)
        opt.step()
        agent._optimizer_stepped(opt, (), {})  # what torch's global hook calls after opt.step()
    agent._at_exit()
    assert agent.steps == 5
    assert torch.allclose(param.detach(), torch.full((2,), 0.5))  # five SGD steps of 0.1, as without ddprof
    assert "cannot write the status file" in caplog.text
    assert "capture is off for rank 0" in caplog.text


def test_a_run_dir_without_trace_is_explained_from_the_status_files(tmp_path):
    from ddprof.capture_status import STATUS_DIR, explain_no_trace

    assert explain_no_trace(tmp_path) is None  # no status file: nothing to say beyond "no trace files"
    folder = tmp_path / STATUS_DIR
    folder.mkdir(parents=True)
    base = {"host": "h", "step_source": "optimizer.step", "exit": {"how": "exited normally"}, "first_recorded_step": 2}
    (folder / "h-2.json").write_text(json.dumps(base | {"rank": 1, "pid": 2, "steps_seen": 2}))
    (folder / "h-1.json").write_text(json.dumps(base | {"rank": 0, "pid": 1, "steps_seen": 0}))
    (folder / "h-9.json").write_text("{not json")  # a torn or foreign file is skipped
    lines = explain_no_trace(tmp_path).splitlines()
    assert lines == [
        f"no trace file in {tmp_path}: 2 process(es) of the capture reported, none wrote a trace",
        "  rank 0 (host h, pid 1): 0 steps seen (step source: optimizer.step); ended: exited normally: no step was "
        "counted (optimizer.step never ran); name the step function with ddprof launch --step-on MODULE:FUNCTION",
        "  rank 1 (host h, pid 2): 2 steps seen (step source: optimizer.step); ended: exited normally: the job "
        "ended before step 2, the first the schedule records; lower --wait/--warmup",
    ]
