"""The parts of ``ddprof launch``'s capture one at a time: the step rule with several optimizers, the
``--step-on`` and ``--step-on-loader`` hooks, the bootstrap's chaining to a site's own ``sitecustomize``, and failures that must not
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

    def __init__(self, run_dir, step_on=None, step_on_loader=None):
        super().__init__({"run_dir": str(run_dir), "profile": {}, "step_on": step_on, "step_on_loader": step_on_loader})
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
    for bad in ("DataLoader", "__main__:loader", ":DataLoader"):
        with pytest.raises(UsageError, match="--step-on-loader"):
            launch(tmp_path / "run", [sys.executable, "-c", "pass"], step_on_loader=bad)
    with pytest.raises(UsageError, match="choose one step source"):
        launch(tmp_path / "run", [sys.executable, "-c", "pass"], step_on="m:f", step_on_loader="m:L")


LOADERS = '''
class Loader:
    """A loader as a script's module defines it: an iterable whose iterator has attributes of its own."""
    def __init__(self, items):
        self.items = items
    def __iter__(self):
        return LoaderIter(self.items)

class LoaderIter:
    def __init__(self, items):
        self._items, self.fetched = iter(items), 0
    def __iter__(self):
        return self
    def __next__(self):
        item = next(self._items)
        self.fetched += 1
        return item
    def __len__(self):
        return 3

train = Loader([1, 2, 3])
val = Loader([4, 5])
'''


@pytest.mark.parametrize(("name", "counted"), [("myloaders:train", {"train"}), ("myloaders:Loader", {"train", "val"})])
def test_step_on_loader_counts_one_step_per_batch_of_the_loader_named(tmp_path, monkeypatch, name, counted):
    (tmp_path / "myloaders.py").write_text(LOADERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    agent = Counting(tmp_path / "run", step_on_loader=name)
    assert agent.status.data["step_source"] == f"loader {name}"
    agent.arm(eager_status=False)
    try:
        import myloaders

        for loader, size in ((myloaders.train, 3), (myloaders.val, 2)):
            before = agent.boundaries
            it = iter(loader)
            assert (len(it), it.fetched) == (3, 0)  # the loader's iterator shows through
            ends = []
            for item in it:  # the step of each batch ends at the next fetch, the last one at the loader's end
                ends.append(agent.boundaries - before)
                assert item in loader.items
            assert ends == ([0, 1, 2][:size] if loader in {getattr(myloaders, n) for n in counted} else [0] * size)
            assert agent.boundaries - before == (size if ends[-1] else 0)
            assert next(it, None) is None and agent.boundaries - before == (size if ends[-1] else 0)
        assert [x for x in myloaders.train] == [1, 2, 3]  # a second epoch counts again, from its second batch
        assert agent.boundaries == 3 * 2 + (2 if "val" in counted else 0)
    finally:
        sys.meta_path.remove(agent._hooks)
        sys.modules.pop("myloaders", None)


def test_step_on_loader_naming_nothing_is_logged_and_the_job_goes_on(tmp_path, monkeypatch, caplog):
    (tmp_path / "myloaders.py").write_text(LOADERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    agent = Counting(tmp_path / "run", step_on_loader="myloaders:trian")
    agent.arm(eager_status=False)
    try:
        import myloaders

        assert list(myloaders.train) == [1, 2, 3] and agent.boundaries == 0
    finally:
        sys.meta_path.remove(agent._hooks)
        sys.modules.pop("myloaders", None)
    assert "capture hook on myloaders failed: AttributeError" in caplog.text and "(training continues)" in caplog.text
    (error,) = agent.status.data["errors"]
    assert error.startswith("--step-on-loader myloaders:trian: AttributeError") and "no attribute 'trian'" in error


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
    from ddprof.store.capture_status import STATUS_DIR, explain_no_trace

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
        "counted (optimizer.step never ran); name the step function with ddprof launch --step-on MODULE:FUNCTION "
        "(or the loader with --step-on-loader MODULE:NAME)",
        "  rank 1 (host h, pid 2): 2 steps seen (step source: optimizer.step); ended: exited normally: the job "
        "ended before step 2, the first the schedule records; lower --wait/--warmup",
    ]


def test_a_run_on_demand_only_that_no_trigger_reached_says_so(tmp_path):
    """``ddprof launch --active 0`` and no ``ddprof trigger``: the explanation and the launcher's closing
    line say that no trigger was sent; a rank that was asked for a window is explained as before."""
    from ddprof.collectors.launch import closing_line

    from ddprof.store.capture_status import STATUS_DIR, explain_no_trace

    folder = tmp_path / STATUS_DIR
    folder.mkdir(parents=True)
    base = {"host": "h", "step_source": "optimizer.step", "exit": {"how": "exited normally"}, "steps_seen": 40,
            "first_recorded_step": None, "active": 0, "windows": []}
    for r in (0, 1):
        (folder / f"h-{r}.json").write_text(json.dumps(base | {"rank": r, "pid": r}))
    lines = explain_no_trace(tmp_path).splitlines()
    assert lines[0] == (f"no trace file in {tmp_path}: 2 process(es) of the capture reported, none wrote a trace: "
                        "they record on demand only (--active 0) and no trigger was sent")
    assert lines[1] == ("  rank 0 (host h, pid 0): 40 steps seen (step source: optimizer.step); ended: exited "
                        "normally: --active 0 records only the windows ddprof trigger asks for, and no trigger was "
                        f"sent: ask with ddprof trigger {tmp_path} --steps N while the job runs")
    assert "no trigger was sent" in closing_line(tmp_path)
    # rank 1 was asked for a window (the job ended before it began): not "no trigger was sent"
    asked = {"id": 1, "start_step": 41, "end_step": 43, "written": None}
    (folder / "h-1.json").write_text(json.dumps(base | {"rank": 1, "pid": 1, "windows": [asked]}))
    text = explain_no_trace(tmp_path)
    assert text.splitlines()[0].endswith("none wrote a trace")
    assert "no trigger was sent" not in text.splitlines()[2]
    assert "no trigger was sent" not in closing_line(tmp_path)
