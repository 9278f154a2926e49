"""A sample of `make menagerie` in `make test`: twelve architectures, three sources, the instruments' four lenses
run again here on each (1-3 s a model), and the diagnosis on three of them (15-30 s each; tests/test_diagnose.py and
tests/test_diagnose_inputs.py diagnose a dozen more models, Hugging Face's GPT-2 and T5 among them).

Each lens must say what the committed report (menagerie/report.json) says for the model, and none may fail with
an error of ours: the report is reproducible, and a change that breaks an instrument on a real model is caught
here before the next `make menagerie`. The sample: the smallest models of each source, and one of each kind that
the others are not (segmentation; an encoder-decoder and a mixture of experts called with keyword batches).
"""
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests import menagerie, menagerie_models, menagerie_report

pytest.importorskip("timm")
pytest.importorskip("transformers")

SAMPLE = menagerie_models.SAMPLE
DIAGNOSED = ("torchvision/squeezenet1_1", "timm/test_vit", "transformers/mixtral")
REPORT = menagerie_report.load(menagerie.REPO / "menagerie")


def test_the_sample_is_twelve_models_of_the_three_sources():
    names = {e.name for e in menagerie_models.entries()}
    assert len(SAMPLE) >= 12 and set(SAMPLE) <= names and set(DIAGNOSED) <= set(SAMPLE)
    assert {name.split("/")[0] for name in SAMPLE} == {"torchvision", "timm", "transformers"}


@pytest.mark.slow                   # 5-35 s each: make check leaves them to make test
@pytest.mark.parametrize("name", SAMPLE)
def test_each_lens_says_what_the_committed_report_says(name):
    lenses = menagerie_report.LENSES if name in DIAGNOSED else menagerie_report.LENSES[:-1]
    row = menagerie.measure(menagerie_models.by_name()[name], lenses)
    assert name in REPORT, f"{name} is not in menagerie/report.json: run make menagerie MENAGERIE_ARGS='--only {name}'"
    said = {lens: row["lenses"][lens]["status"] for lens in lenses}
    assert "fails" not in said.values(), {lens: row["lenses"][lens]["detail"] for lens in said}
    assert said == {lens: REPORT[name]["lenses"][lens]["status"] for lens in said}, row


def test_a_stopped_run_leaves_no_model_process_behind(tmp_path):
    run = subprocess.Popen([sys.executable, "-m", "tests.menagerie", "--only", "timm/test_vit", "--out", str(tmp_path)],
                           cwd=menagerie.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (children := psutil.Process(run.pid).children()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert children, "the run started no model process in 60 s"
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM and "stopped by signal 15" in err
    assert psutil.wait_procs(children, timeout=10)[1] == []      # none still alive


def test_a_run_of_some_lenses_keeps_the_others_of_a_model_already_in_the_report():
    lens = {"status": "agrees", "detail": "", "s": 1.0}
    old = {"name": "m", "builds": True, "build_s": 0.5, "s": 2.5, "lenses": {"trace": lens, "work": lens}}
    diagnosed = {"name": "m", "builds": True, "build_s": 0.4, "s": 9.0,
                 "lenses": {"diagnose": {"status": "disagrees", "detail": "x", "s": 8.0}}}
    assert menagerie._missing(old, ("diagnose",)) and not menagerie._missing(old, ("trace",))
    merged = menagerie._merged(old, diagnosed, ("diagnose",))
    assert merged["lenses"] == {"trace": lens, "work": lens, "diagnose": diagnosed["lenses"]["diagnose"]}
    assert merged["s"] == 10.5 and old["lenses"] == {"trace": lens, "work": lens}      # the old row is not changed
    timed_out = {"name": "m", "builds": True, "timed_out": True, "s": 900.0, "error": "no result in 900 s (killed)"}
    failed = menagerie._merged(old, timed_out, ("diagnose",))
    assert not failed.get("timed_out") and failed["lenses"]["diagnose"]["status"] == "fails"
    assert failed["lenses"]["trace"] == lens
    assert menagerie._merged(old, timed_out, menagerie.LENSES) is timed_out       # a whole run replaces the row
