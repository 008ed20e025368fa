"""Each setting declared once (scaler/config.py) and everything derived from it: CLI options and their help, the
settings objects, the Cluster and SchedulerClusterCombo keywords, child-process arguments and the docs' tables."""

from __future__ import annotations

import copy
import inspect
import os
import pickle
import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any, Dict, List

import pytest

from scaler import config
from scaler.cluster import Cluster
from scaler.cluster.cli import parse_arguments as parse_cluster_arguments
from scaler.cluster.combo import SchedulerClusterCombo
from scaler.scheduler.cli import parse_arguments as parse_scheduler_arguments
from scaler.scheduler.settings import SchedulerSettings
from scaler.settings_spec import CLUSTER, COMPONENTS, MONITOR, SCHEDULER, WORKER, Setting, fill_option_tables
from scaler.worker.settings import WorkerSettings

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ADDRESS = "tcp://127.0.0.1:2345"


def other_value(setting: Setting, component: str) -> Any:
    """A valid value that is not the component's default, so that passing it on is visible."""
    default = setting.default_in(component)
    if setting.kind is bool:
        return not default
    if setting.choices is not None:
        return next(choice for choice in setting.choices if choice != default)
    if setting.many:
        return ("/dev/stderr", "/dev/stdout")
    if setting.name == "memory_limit":
        return "400MB"
    if setting.kind is str:
        return "ipc:///tmp/scaler-test-other" if setting.name == "monitor_address" else None
    if setting.name.endswith("_fraction"):
        return default / 2
    return 7 if default is None else default * 3


def non_defaults(component: str) -> Dict[str, Any]:
    values = {setting.name: other_value(setting, component) for setting in config.SETTINGS.of(component)}
    return {name: value for name, value in values.items() if value is not None}  # curve files need real keys


def test_every_component_has_settings_and_every_setting_a_flag_and_help() -> None:
    for component in COMPONENTS:
        assert config.SETTINGS.of(component), component
    for setting in config.SETTINGS:
        assert setting.flags[0].startswith("--") and setting.help and not setting.help.endswith(".")
        assert "%" not in setting.help.replace("%%", ""), "argparse %-formats help strings"


def test_a_setting_rejects_wrong_types_and_values_with_its_name() -> None:
    with pytest.raises(TypeError, match="heartbeat_interval_seconds must be a number, got '1'"):
        SchedulerSettings(ADDRESS, heartbeat_interval_seconds="1")
    with pytest.raises(ValueError, match="worker_timeout_seconds must be a positive number, got 0"):
        SchedulerSettings(ADDRESS, worker_timeout_seconds=0)
    with pytest.raises(ValueError, match="heartbeat_interval_seconds must be a positive number, got inf"):
        WorkerSettings(ADDRESS, heartbeat_interval_seconds=float("inf"))
    with pytest.raises(TypeError, match="max_tasks_waiting must be an int, got True"):
        SchedulerSettings(ADDRESS, max_tasks_waiting=True)
    with pytest.raises(ValueError, match="event_loop must be one of builtin, uvloop, got 'trio'"):
        SchedulerSettings(ADDRESS, event_loop="trio")
    with pytest.raises(TypeError, match="logging_paths must be a list or tuple of str"):
        WorkerSettings(ADDRESS, logging_paths="/dev/stdout")
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_task_waiting'"):
        SchedulerSettings(ADDRESS, max_task_waiting=10)
    with pytest.raises(TypeError, match="unexpected keyword argument 'worker_timeout_seconds'"):
        WorkerSettings(ADDRESS, worker_timeout_seconds=10)  # a scheduler setting, not a worker's


def test_per_worker_queue_size_has_one_meaning_and_a_default_per_side() -> None:
    assert SchedulerSettings(ADDRESS).per_worker_queue_size is None  # no cap: what each worker announces
    assert WorkerSettings(ADDRESS).per_worker_queue_size == 1000
    assert WorkerSettings(ADDRESS, per_worker_queue_size=8).queue_size == 8  # the worker's own name for it
    with pytest.raises(TypeError, match="per_worker_queue_size must be an int, got None"):
        WorkerSettings(ADDRESS, per_worker_queue_size=None)  # a worker must announce a number
    with pytest.warns(DeprecationWarning, match=r"queue_size=\.\.\.\) is now per_worker_queue_size"):
        assert WorkerSettings(ADDRESS, queue_size=9).per_worker_queue_size == 9
    settings, _ = parse_scheduler_arguments(["-qs", "5", ADDRESS])
    assert settings.per_worker_queue_size == 5
    settings, _, _ = parse_cluster_arguments(["--queue-size", "6", ADDRESS])  # the flag's earlier name
    assert settings.per_worker_queue_size == 6


def test_settings_objects_are_plain_read_only_slots() -> None:
    """The scheduler's core reads its settings in its loop: plain slot reads, nothing computed per access."""
    for settings in (SchedulerSettings(ADDRESS), WorkerSettings(ADDRESS)):
        assert not hasattr(settings, "__dict__")
        for name in config.SETTINGS.names(settings.COMPONENT):
            assert type(inspect.getattr_static(type(settings), name)).__name__ == "member_descriptor", name
        with pytest.raises(AttributeError, match="read-only"):
            settings.address = "tcp://127.0.0.1:1"
        assert pickle.loads(pickle.dumps(settings)) == settings == copy.copy(settings)
        changed = settings.replace(logging_level="DEBUG")
        assert changed.logging_level == "DEBUG" and changed != settings and settings.logging_level == "INFO"


@pytest.mark.parametrize("component", [SCHEDULER, WORKER])
def test_child_process_arguments_give_the_child_the_same_settings(component: str) -> None:
    """What Cluster and SchedulerClusterCombo hand their child processes parses back into equal settings."""
    settings_class, parse = {
        SCHEDULER: (SchedulerSettings, lambda argv: parse_scheduler_arguments(argv)[0]),
        WORKER: (WorkerSettings, lambda argv: parse_cluster_arguments(argv)[0]),
    }[component]
    for values in ({}, non_defaults(component)):
        settings = settings_class(ADDRESS, **values)
        argv = config.SETTINGS.to_argv(settings.as_keywords(), component)
        assert parse([*argv, "--", ADDRESS]) == settings
        if not values:  # defaults are left out of the command line; the monitor address is the one derived here
            assert argv in ([], ["--monitor-address", getattr(settings, "monitor_address", None)])


def test_cluster_and_combo_keywords_are_the_declared_settings() -> None:
    cluster = inspect.signature(Cluster).parameters
    assert list(cluster) == ["address", "n_workers", *config.SETTINGS.names(WORKER)]
    combo = inspect.signature(SchedulerClusterCombo).parameters
    curve_files = {"curve_secret_key_file", "curve_server_key_file", "curve_authorized_keys_dir"}
    expected = {*config.SETTINGS.names(SCHEDULER, CLUSTER, WORKER), "address", "curve_keys_dir"} - curve_files
    assert set(combo) == expected
    cluster = Cluster(ADDRESS, 2, **non_defaults(WORKER))
    assert cluster.settings == WorkerSettings(ADDRESS, **non_defaults(WORKER))


def test_option_tables_are_the_declarations() -> None:
    """`python scripts/doc_tables.py` rewrites them; a table edited by hand, or a new setting, fails here."""
    reference = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert fill_option_tables(reference, config.SETTINGS) == reference, "run: python scripts/doc_tables.py"
    tables = re.findall(r"<!-- options: \S+ ([\w ]+) -->", reference)
    assert {component for table in tables for component in table.split()} == set(COMPONENTS)


def test_limits_table_shows_the_declared_defaults() -> None:
    security = (ROOT / "docs" / "deployment" / "security.md").read_text()
    section = security[security.index("## Limits on untrusted input") :]
    rows = re.findall(r"^\| `(--[\w-]+)` \| ([^|]+) \|", section[: section.index("\n\n", section.index("| ---"))], re.M)
    assert len(rows) == 4
    by_flag = {setting.flags[0]: setting for setting in config.SETTINGS}
    for flag, default in rows:
        assert by_flag[flag].default_text(SCHEDULER) == default.strip(), flag


def console_scripts() -> List[str]:
    tomllib = pytest.importorskip("tomllib")
    with open(ROOT / "pyproject.toml", "rb") as file:
        return sorted(tomllib.load(file)["project"]["scripts"])


def option_helps(help_text: str) -> Dict[str, str]:
    """Each option of a `-h` text (by its first flag) and its help, joined into one line ("" when it has none)."""
    helps: Dict[str, str] = {}
    current = None
    for line in help_text.splitlines():
        found = re.match(r"^  (-[\w-]+)", line)
        if found:
            current = found.group(1)
            parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)  # argparse puts 2+ spaces before the help
            helps[current] = parts[1] if len(parts) == 2 else ""
        elif current is not None and line.startswith("    "):
            helps[current] = (helps[current] + " " + line.strip()).strip()
        else:
            current = None
    return helps


@pytest.mark.parametrize("command", console_scripts())
def test_every_console_script_help_reads_well(command: str) -> None:
    completed = subprocess.run(
        [str(BIN / command), "-h"], capture_output=True, text=True, timeout=30, env={**os.environ, "COLUMNS": "80"}
    )
    assert completed.returncode == 0 and completed.stderr == "", completed.stderr
    text = completed.stdout
    assert text.startswith(f"usage: {command if command != 'scaler_worker' else 'scaler_cluster'} ")
    assert all(len(line) <= 80 for line in text.splitlines()), "argparse wraps at COLUMNS"
    assert "(default: None)" not in text and "%(default)" not in text and "==SUPPRESS==" not in text
    helps = option_helps(text)
    assert helps["-h"] == "show this help message and exit"
    for flag, help_text in helps.items():
        assert help_text, f"{flag} has no help"
        assert help_text.count("(default:") <= 1, help_text
    components = {
        "scaler_scheduler": [SCHEDULER],
        "scaler_cluster": [CLUSTER, WORKER],
        "scaler_worker": [CLUSTER, WORKER],
        "scaler_top": [MONITOR],
        "scaler_ui": [MONITOR],
    }.get(command, [])
    joined = " ".join(text.split())
    for setting in config.SETTINGS.of(*components):
        component = next(component for component in components if component in setting.used_by)
        assert f"{setting.help} (default: {setting.default_text(component)})" in joined, setting.name
        assert joined.count(f"{setting.help} (default:") == 1, setting.name


def test_settings_fields_are_the_declarations() -> None:
    """scaler/settings_fields.py gives mypy the settings objects' attributes: a new or changed setting fails here until
    `python scripts/settings_fields.py` rewrites it."""
    assert (ROOT / config.FIELDS_PATH).read_text() == config.settings_fields_source(), (
        "run: python scripts/settings_fields.py"
    )
    # every slot a settings object fills is an attribute mypy sees, of the type the object holds
    for cls, component in ((SchedulerSettings, SCHEDULER), (WorkerSettings, WORKER)):
        hints = typing.get_type_hints(cls)
        settings = cls(ADDRESS)
        for name in (*config.SETTINGS.names(component), "address"):
            value = getattr(settings, name)
            kind = hints[name]
            union = typing.get_args(kind) if typing.get_origin(kind) is typing.Union else (kind,)  # Optional[X]
            allowed = tuple(typing.get_origin(each) or each for each in union)  # Tuple[str, ...] -> tuple
            assert isinstance(value, allowed), (cls.__name__, name, value, kind)
