"""The ``onnxflow`` logger: onnxruntime's severities (0 verbose .. 4 fatal) as logging levels,
the process default (``set_default_logger_severity``) and a session's own
``log_severity_level`` and ``logid``."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import onnxflow
from onnxflow import logs

RNN = Path(__file__).resolve().parents[1] / "examples" / "rnn_scan.onnx"


@pytest.fixture(autouse=True)
def default_level() -> Iterator[None]:
    """Each test starts with the logger as importing onnxflow leaves it (no level of its own)
    and leaves it there."""
    logger = logging.getLogger("onnxflow")
    level = logger.level
    logger.setLevel(logging.NOTSET)
    yield
    logger.setLevel(level)


def _created(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "session created" in r.getMessage()]


def _session(severity: int = -1, logid: str = "") -> onnxflow.InferenceSession:
    options = onnxflow.SessionOptions()
    options.log_severity_level = severity
    options.logid = logid
    return onnxflow.InferenceSession(RNN, options)


@pytest.mark.parametrize(
    ("severity", "level"),
    [
        (0, logging.DEBUG),
        (1, logging.INFO),
        (2, logging.WARNING),
        (3, logging.ERROR),
        (4, logging.CRITICAL),
        (-1, logging.NOTSET),
    ],
)
def test_severities_are_logging_levels(severity: int, level: int) -> None:
    assert logs.level_of(severity) == level
    if severity >= 0:
        assert logs.severity_of(level) == severity


@pytest.mark.parametrize("severity", [5, -2, True, "2"])
def test_a_severity_out_of_range_is_refused_by_name(severity: object) -> None:
    with pytest.raises(onnxflow.InputError, match="log_severity_level must be -1"):
        logs.level_of(severity)  # type: ignore[arg-type]


def test_the_logger_is_named_onnxflow_and_leaves_output_to_the_application() -> None:
    assert logs.logger is logging.getLogger("onnxflow")
    assert any(isinstance(h, logging.NullHandler) for h in logs.logger.handlers)
    assert logs.get_severity() == 2  # warning, until set


def test_a_session_logs_its_creation_at_info(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="onnxflow"):
        _session()
    (record,) = _created(caplog)
    assert record.name == "onnxflow" and record.levelno == logging.INFO
    assert record.pathname.endswith("session.py")  # where the session logged it
    assert "graph 'rnn-encoding', 1 nodes" in record.getMessage()


def test_at_the_default_severity_nothing_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)  # logging's default level, the application's choice
    _session()
    assert not _created(caplog)
    assert logs.get_severity() == 2


def test_the_application_level_decides(caplog: pytest.LogCaptureFixture) -> None:
    """With no level of its own, the ``onnxflow`` logger follows the root logger's."""
    caplog.set_level(logging.INFO)
    assert logs.get_severity() == 1
    _session()
    assert len(_created(caplog)) == 1


def _python(code: str) -> str:
    """What ``code`` prints, run by a fresh interpreter (which imports onnxflow anew)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout + done.stderr


def test_importing_onnxflow_sets_no_level_and_adds_a_null_handler() -> None:
    shown = _python(
        "import logging, onnxflow\n"
        "log = logging.getLogger('onnxflow')\n"
        "print(log.level, [type(h).__name__ for h in log.handlers])"
    )
    assert shown.split() == ["0", "['NullHandler']"]


def test_a_level_set_before_the_import_is_kept() -> None:
    shown = _python(
        "import logging\n"
        "logging.getLogger('onnxflow').setLevel(logging.ERROR)\n"
        "import onnxflow\n"
        "print(logging.getLogger('onnxflow').level, onnxflow.logs.get_severity())"
    )
    assert shown.split() == [str(logging.ERROR), "3"]


def test_basic_config_at_info_shows_onnxflow_info_messages() -> None:
    """The module docstring's own advice, in a fresh process."""
    shown = _python(
        "import logging, sys, onnxflow\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
        f"onnxflow.InferenceSession({str(RNN)!r})\n"
    )
    assert "INFO:onnxflow:session created in " in shown


@pytest.mark.parametrize(
    ("flags", "shown", "hidden"),
    [
        (["-v"], "INFO onnxflow: session created", "DEBUG"),
        (["--log-level", "info"], "INFO onnxflow: session created", "DEBUG"),
        (["--log-level", "1"], "INFO onnxflow: session created", "DEBUG"),
        (["-vv"], "INFO onnxflow: session created", None),
        ([], None, "session created"),
    ],
)
def test_the_cli_shows_log_records_asked_for(
    flags: list[str], shown: str | None, hidden: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnxflow.cli import main

    before = (logs.logger.level, list(logs.logger.handlers), logs.logger.propagate)
    assert main(["check", str(RNN), *flags]) == 0
    assert main([*flags, "run", str(RNN), "--dim", "S=2", "--dim", "B=1"]) == 0
    err = capsys.readouterr().err
    if shown:
        assert err.count(shown) == 2  # after the subcommand, and before it
    if hidden:
        assert hidden not in err
    # the command leaves the logger as it found it
    assert (logs.logger.level, list(logs.logger.handlers), logs.logger.propagate) == before


def test_an_unknown_cli_log_level_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    from onnxflow.cli import main

    assert main(["check", str(RNN), "--log-level", "loud"]) == 1
    err = capsys.readouterr().err
    assert "unknown log level 'loud'" in err and "debug, info" in err


def test_the_process_default_is_set_default_logger_severity(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    onnxflow.set_default_logger_severity(1)
    assert logs.get_severity() == 1 and logs.logger.level == logging.INFO
    _session()
    assert len(_created(caplog)) == 1
    onnxflow.set_default_logger_severity(3)
    _session()
    assert len(_created(caplog)) == 1


def test_a_session_severity_overrides_the_default(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    logs.set_severity(3)
    _session(severity=1, logid="loud")
    _session(severity=-1, logid="default")
    logs.set_severity(0)
    _session(severity=2, logid="quiet")
    (record,) = _created(caplog)
    assert record.pathname.endswith("session.py")
    assert record.getMessage().startswith("[loud] session created")
    assert record.logid == "loud"  # type: ignore[attr-defined]


def test_the_default_severity_cannot_be_minus_one() -> None:
    with pytest.raises(onnxflow.InputError, match="found -1"):
        logs.set_severity(-1)


def _run_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if " took " in r.getMessage()]


def test_a_run_logs_at_its_own_severity(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    logs.set_severity(2)  # the process default: warning, whatever the application shows
    sess = _session(logid="s")
    feeds = {"X": np.zeros((2, 1, 4), np.float32), "H_0": np.zeros((1, 8), np.float32)}
    options = onnxflow.RunOptions()
    options.run_tag = "first"
    options.log_severity_level = 1
    sess.run(None, feeds, options)
    options.log_severity_level = 2
    sess.run(None, feeds, options)
    options.log_severity_level = -1  # the session's: the default, warning
    sess.run(None, feeds, options)
    (message,) = _run_records(caplog)
    assert message.startswith("[s] run 'first' took ") and message.endswith(" ms")


def test_the_bench_reports_progress_through_the_logger(caplog: pytest.LogCaptureFixture) -> None:
    from onnxflow.bench.zoo import ZooModel
    from onnxflow.bench.zoo.run import run_zoo
    from onnxflow.bench.zoo.sources import Built

    def not_buildable(target: Path) -> None:
        raise ModuleNotFoundError("no framework here")

    caplog.set_level(logging.INFO, logger="onnxflow.bench")
    run_zoo([ZooModel("nothing", "trees", Built(not_buildable), dict, "-")], 0.1, ("onnxflow",))
    (record,) = [r for r in caplog.records if r.name == "onnxflow.bench.zoo.run"]
    assert record.getMessage() == "[zoo] nothing ..." and record.levelno == logging.INFO


def test_show_on_stderr_shows_messages_once(capsys: pytest.CaptureFixture[str]) -> None:
    name = "onnxflow.test_show_on_stderr"
    handler = logs.show_on_stderr(name)
    try:
        assert logs.show_on_stderr(name) is handler  # a second call adds nothing
        logging.getLogger(name).info("measuring %s ...", "x")
        logging.getLogger(name).debug("not shown")
        assert capsys.readouterr().err == "measuring x ...\n"
    finally:
        logging.getLogger(name).removeHandler(handler)
