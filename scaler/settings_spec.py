"""Internal: the machinery behind scaler.config: one declaration per setting, and everything derived from it.

A `Setting` says once what a setting is (name, type, default, help, validation, CLI flags, which components use it).
From the declarations come the argparse options of every CLI, the keywords of `Cluster` and `SchedulerClusterCombo`
and their validation, the attributes of the settings objects, the arguments handed to child processes, and the option
tables of README.md. Standard library only, Python 3.9 syntax: the scheduler imports this under PyPy. None of it runs
per task: a settings object is validated once and then read as plain slots.
"""

from __future__ import annotations

import argparse
import inspect
import math
import re
import warnings
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

# The components a setting can belong to.
SCHEDULER = "scheduler"  # scaler_scheduler, SchedulerSettings
CLUSTER = "cluster"  # scaler_cluster / scaler_worker and Cluster, the launcher of N workers (n_workers)
WORKER = "worker"  # each worker of a cluster: WorkerSettings, options of scaler_cluster and Cluster
MONITOR = "monitor"  # scaler_top and scaler_ui
COMPONENTS = (SCHEDULER, CLUSTER, WORKER, MONITOR)

Check = Callable[[Any], Optional[str]]  # the complaint about a value ("must be >= 1"), or None if it is fine


def at_least(minimum: int) -> Check:
    def check(value: Any) -> Optional[str]:
        return None if value >= minimum else f"must be >= {minimum}"

    return check


def positive(value: Any) -> Optional[str]:
    return None if value > 0 and math.isfinite(value) else "must be a positive number"


class Setting:
    """One setting, declared once in scaler.config (see there for examples)."""

    __slots__ = (
        "name",
        "kind",
        "default",
        "help",
        "flags",
        "used_by",
        "check",
        "choices",
        "many",
        "metavar",
        "default_for",
        "none_means",
        "old_flags",
        "old_keywords",
    )

    def __init__(
        self,
        name: str,
        kind: type,
        default: Any,
        help: str,
        *,
        flags: Sequence[str],
        used_by: Sequence[str],
        check: Optional[Check] = None,
        choices: Optional[Sequence[str]] = None,
        many: bool = False,
        metavar: Optional[str] = None,
        default_for: Optional[Mapping[str, Any]] = None,
        none_means: Optional[str] = None,
        old_flags: Sequence[str] = (),
        old_keywords: Sequence[str] = (),
    ) -> None:
        """
        name: the keyword and attribute name, e.g. "heartbeat_interval_seconds".
        kind: int, float, str or bool; with many=True, a non-empty sequence of str (a tuple once validated).
        default: the value when none is given; default_for overrides it for some components, and a None default
            means "not set", which none_means describes in the help.
        flags: the CLI option strings, long one first ("--heartbeat-interval", "-hi"); a bool gets "--no-..." too.
        old_flags, old_keywords: earlier spellings, still accepted and hidden from the help.
        """
        if kind not in (int, float, str, bool) or (many and kind is not str):
            raise TypeError(f"setting {name}: unsupported kind {kind!r}")
        if not flags or not flags[0].startswith("--"):
            raise ValueError(f"setting {name}: the first flag must be a long one, got {flags!r}")
        unknown = set(used_by) - set(COMPONENTS)
        if not used_by or unknown:
            raise ValueError(f"setting {name}: used_by must name components of {COMPONENTS}, got {used_by!r}")
        self.name = name
        self.kind = kind
        self.default = default
        self.help = help
        self.flags = tuple(flags)
        self.used_by = tuple(used_by)
        self.check = check
        self.choices = tuple(choices) if choices is not None else None
        self.many = many
        self.metavar = metavar
        self.default_for = dict(default_for or {})
        self.none_means = none_means
        self.old_flags = tuple(old_flags)
        self.old_keywords = tuple(old_keywords)
        for component in self.used_by:
            component_default = self.default_in(component)
            if component_default is None:
                if none_means is None:
                    raise ValueError(f"setting {name}: a None default needs none_means, to say what it means")
            else:
                self.validate(component_default, component)

    def __repr__(self) -> str:
        return f"<Setting {self.name} {self.flags[0]}>"

    def default_in(self, component: str) -> Any:
        return self.default_for.get(component, self.default)

    # ---- values ------------------------------------------------------------------------------------------------------

    def validate(self, value: Any, component: Optional[str] = None) -> Any:
        """The value as settings objects hold it (a float for a float setting, a tuple for many), or TypeError or
        ValueError naming the setting. None is accepted where the component's default is None."""
        if value is None and component is not None and self.default_in(component) is None:
            return None
        complaint = self._complaint(value)
        if complaint is not None:
            error, text = complaint
            raise error(f"{self.name} {text}, got {value!r}")
        if self.many:
            return tuple(value)
        return float(value) if self.kind is float else value

    def _complaint(self, value: Any) -> Optional[Tuple[type, str]]:
        """(TypeError or ValueError, what is wrong) about a value, or None if it is fine."""
        if self.many:
            if isinstance(value, str) or not isinstance(value, (list, tuple)):
                return TypeError, "must be a list or tuple of str"
            if not value or not all(isinstance(item, str) and item for item in value):
                return ValueError, "must be a non-empty list of non-empty str"
            return None
        if self.kind is bool and not isinstance(value, bool):
            return TypeError, "must be a bool"
        if self.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            return TypeError, "must be an int"
        if self.kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return TypeError, "must be a number"
        if self.kind is str and not isinstance(value, str):
            return TypeError, "must be a str"
        if self.choices is not None and value not in self.choices:
            return ValueError, f"must be one of {', '.join(self.choices)}"
        text = self.check(value) if self.check is not None else None
        return None if text is None else (ValueError, text)

    def parse(self, text: str) -> Any:
        """A command-line value: converted and validated, or argparse.ArgumentTypeError saying what is wrong."""
        try:
            value = self.kind(text) if self.kind in (int, float) else text
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {self.kind.__name__} value: {text!r}") from None
        complaint = None if self.choices is not None else self._complaint([value] if self.many else value)
        if complaint is not None:  # argparse checks choices itself, and says "invalid choice" listing them
            raise argparse.ArgumentTypeError(f"{complaint[1]}, got {value!r}")
        return value

    def to_argv(self, value: Any) -> List[str]:
        """The command-line arguments that give this value to a child process parsing the same declaration."""
        if value is None:
            return []
        if self.kind is bool:
            return [self.flags[0] if value else "--no-" + self.flags[0][2:]]
        if self.many:
            return [self.flags[0], *value]
        return [self.flags[0], repr(value) if self.kind is float else str(value)]

    # ---- text --------------------------------------------------------------------------------------------------------

    def default_text(self, component: str) -> str:
        """The default as the help and README show it: "1 s", "512 MiB", "10,000,000", "on"."""
        value = self.default_in(component)
        if value is None:
            return str(self.none_means)
        if self.kind is bool:
            return "on" if value else "off"
        if self.many:
            return " ".join(value)
        if self.kind is float and self.name.endswith("_seconds"):
            return f"{value:g} s"
        if self.kind is int and self.name.endswith("_bytes") and value % (1024 * 1024) == 0:
            return f"{value // (1024 * 1024)} MiB"
        if self.kind is int and value >= 10_000:
            return f"{value:,}"
        return str(value)

    def help_text(self, component: str) -> str:
        return f"{self.help} (default: {self.default_text(component)})"

    def value_name(self) -> Optional[str]:
        if self.kind is bool:
            return None
        if self.metavar is not None:
            return self.metavar
        if self.choices is not None:
            return "{" + ",".join(self.choices) + "}"
        if self.name.endswith("_seconds"):
            return "SECONDS"
        if self.name.endswith("_bytes"):
            return "BYTES"
        return "N" if self.kind is int else "VALUE"

    # ---- argparse ----------------------------------------------------------------------------------------------------

    def add_to(self, parser: argparse._ActionsContainer, component: str) -> None:  # a parser, or a group of one
        help_text = self.help_text(component).replace("%", "%%")  # argparse %-formats help strings
        if self.kind is bool:
            parser.add_argument(*self.flags, action=_Toggle, dest=self.name, default=self.default_in(component),
                                help=help_text)  # fmt: skip
        else:
            options: Dict[str, Any] = dict(type=self.parse, dest=self.name, metavar=self.value_name())
            if self.choices is not None:
                options["choices"] = self.choices
            if self.many:
                options["nargs"] = "+"
            parser.add_argument(*self.flags, default=self.default_in(component), help=help_text, **options)
        if self.old_flags:
            hidden: Dict[str, Any] = dict(dest=self.name, help=argparse.SUPPRESS, default=argparse.SUPPRESS)
            if self.kind is bool:
                parser.add_argument(*self.old_flags, action=_Toggle, **hidden)
            else:
                parser.add_argument(*self.old_flags, type=self.parse, nargs="+" if self.many else None, **hidden)


class _Toggle(argparse.Action):
    """--name / --no-name, without the " (default: ...)" that Python 3.9 to 3.12 append to BooleanOptionalAction."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        strings = []
        for option in option_strings:
            strings.append(option)
            if option.startswith("--"):
                strings.append("--no-" + option[2:])
        super().__init__(strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, not (option_string or "").startswith("--no-"))

    def format_usage(self) -> str:
        return " | ".join(self.option_strings)


class HelpFormatter(argparse.HelpFormatter):
    """`--heartbeat-interval, -hi SECONDS` rather than `--heartbeat-interval SECONDS, -hi SECONDS`."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        value = self._format_args(action, self._get_default_metavar_for_optional(action))
        return ", ".join(action.option_strings) + " " + value


class Registry:
    """Every declared setting, in declaration order."""

    def __init__(self) -> None:
        self._settings: Dict[str, Setting] = {}

    def declare(self, name: str, kind: type, default: Any, help: str, **options: Any) -> Setting:
        if name in self._settings:
            raise ValueError(f"setting {name} is declared twice")
        setting = Setting(name, kind, default, help, **options)
        taken = {flag: other.name for other in self._settings.values() for flag in other.flags + other.old_flags}
        for flag in setting.flags + setting.old_flags:
            if flag in taken:
                raise ValueError(f"setting {name}: flag {flag} already belongs to {taken[flag]}")
        self._settings[name] = setting
        return setting

    def __getitem__(self, name: str) -> Setting:
        return self._settings[name]

    def __iter__(self):
        return iter(self._settings.values())

    def of(self, *components: str) -> List[Setting]:
        """The settings these components use: the first component's in declaration order, then the next one's..."""
        found: Dict[str, Setting] = {}
        for component in components:
            for setting in self._settings.values():
                if component in setting.used_by:
                    found.setdefault(setting.name, setting)
        return list(found.values())

    def names(self, *components: str) -> Tuple[str, ...]:
        return tuple(setting.name for setting in self.of(*components))

    def add_arguments(self, parser: argparse.ArgumentParser, component: str) -> None:
        for setting in self.of(component):
            setting.add_to(parser, component)

    def from_arguments(self, args: argparse.Namespace, *components: str) -> Dict[str, Any]:
        return {setting.name: getattr(args, setting.name) for setting in self.of(*components)}

    def resolve(self, component: str, values: Mapping[str, Any], owner: str) -> Dict[str, Any]:
        """Every setting of `component`, from the keywords given (validated) or its default; TypeError on a keyword
        that is none of them, naming `owner` as Python does for an unexpected keyword argument."""
        values = self.rename_old_keywords(values, owner, stacklevel=5)  # warn, resolve, __init__ x2, caller
        declared = self.of(component)
        unknown = set(values) - {setting.name for setting in declared}
        if unknown:
            raise TypeError(f"{owner}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        return {
            setting.name: setting.validate(values.get(setting.name, setting.default_in(component)), component)
            for setting in declared
        }

    def rename_old_keywords(self, values: Mapping[str, Any], owner: str, stacklevel: int = 3) -> Dict[str, Any]:
        """The keywords with earlier spellings (old_keywords) renamed, and a DeprecationWarning for each."""
        renamed = dict(values)
        for setting in self._settings.values():
            for old in setting.old_keywords:
                if old in renamed:
                    if setting.name in renamed:
                        raise TypeError(f"{owner}() got both {old!r} and its new name {setting.name!r}")
                    warnings.warn(f"{owner}({old}=...) is now {setting.name}=...", DeprecationWarning, stacklevel)
                    renamed[setting.name] = renamed.pop(old)
        return renamed

    def to_argv(self, values: Mapping[str, Any], component: str) -> List[str]:
        """Options that make a child process parsing `component`'s CLI hold these values; defaults are left out."""
        argv: List[str] = []
        for setting in self.of(component):
            value = values[setting.name]
            if value != setting.default_in(component):
                argv += setting.to_argv(value)
        return argv

    def signature(
        self, first: Iterable[inspect.Parameter], components: Sequence[str], exclude: Iterable[str] = ()
    ) -> inspect.Signature:
        """An __init__ signature for help() and IDEs: `first` parameters, then every setting as a keyword."""
        skip = set(exclude)
        parameters = list(first)
        skip |= {parameter.name for parameter in parameters}
        for setting in self.of(*components):
            if setting.name not in skip:
                default = setting.default_in(components[0]) if len(components) == 1 else setting.default
                parameters.append(inspect.Parameter(setting.name, inspect.Parameter.KEYWORD_ONLY, default=default))
        return inspect.Signature(parameters)

    def markdown_table(self, title: str, *components: str) -> str:
        """README's option table of `title` (a command) with the settings of `components`: flags, keyword (where
        Python code passes them: not for monitors), default, meaning; each default as the first of `components` that
        uses the setting has it."""
        keywords = any(component != MONITOR for component in components)
        rows = [f"| `{title}` option |{' keyword |' if keywords else ''} default | meaning |"]
        rows.append("| --- |" + " --- |" * (3 if keywords else 2))
        for setting in self.of(*components):
            flags = ", ".join(f"`{flag}`" for flag in setting.flags)
            if setting.kind is bool:
                flags = f"`{setting.flags[0]}` / `--no-{setting.flags[0][2:]}`"
            keyword = f" `{setting.name}` |" if keywords else ""
            component = next(component for component in components if component in setting.used_by)
            default = setting.default_text(component).replace("|", "\\|")
            rows.append(f"| {flags} |{keyword} {default} | {setting.help} |")
        return "\n".join(rows) + "\n"


OPTION_TABLE = re.compile(r"(<!-- options: (\S+) ([\w ]+) -->\n)(.*?)(<!-- /options -->)", re.DOTALL)


def fill_option_tables(text: str, registry: Registry) -> str:
    """`text` (README.md) with every block between `<!-- options: COMMAND COMPONENT... -->` and `<!-- /options -->`
    replaced by the table of those components' settings."""

    def table(match: re.Match) -> str:
        start, command, components, _, end = match.groups()
        return start + registry.markdown_table(command, *components.split()) + end

    return OPTION_TABLE.sub(table, text)


_KIND_NAMES = {int: "int", float: "float", str: "str", bool: "bool"}


def fields_module(registry: Registry, classes: Mapping[str, str], header: str) -> str:
    """The source of a module of annotation-only classes, one per component (`classes`: class name -> component),
    which give mypy and IDEs the attributes that a DeclaredSettings subclass fills from the declarations. `header` is
    the module's docstring."""
    lines = [f'"""{header}"""', "", "from __future__ import annotations", "", "from typing import Optional, Tuple"]
    for class_name, component in classes.items():
        lines += ["", "", f"class {class_name}:", "    __slots__ = ()  # annotations only", ""]
        for setting in registry.of(component):
            kind = "Tuple[str, ...]" if setting.many else _KIND_NAMES[setting.kind]
            if setting.default_in(component) is None:
                kind = f"Optional[{kind}]"
            lines.append(f"    {setting.name}: {kind}")
    return "\n".join(lines) + "\n"


class DeclaredSettings:
    """Base of the settings objects: one read-only slot per declared setting of COMPONENT, validated at creation.

    Subclasses name their slots from the declarations: `__slots__ = ("address", *SETTINGS.names(COMPONENT))`."""

    __slots__ = ()
    COMPONENT = ""
    REGISTRY: Registry
    address: str  # a slot of each subclass, as are the declared settings (their types: scaler/settings_fields.py)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        address = inspect.Parameter("address", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        cls.__signature__ = cls.REGISTRY.signature([address], [cls.COMPONENT])  # type: ignore[attr-defined]

    def __init__(self, address: str, **values: Any) -> None:
        object.__setattr__(self, "address", address)
        for name, value in self.REGISTRY.resolve(self.COMPONENT, values, type(self).__name__).items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only: make a new one")

    def as_keywords(self) -> Dict[str, Any]:
        """The declared settings, as keywords that make an equal object."""
        return {name: getattr(self, name) for name in self.REGISTRY.names(self.COMPONENT)}

    def replace(self, **changes: Any) -> Any:
        """A new object of the same class with `changes`, checked like any other (as dataclasses.replace)."""
        return type(self)(changes.pop("address", self.address), **{**self.as_keywords(), **changes})

    def __reduce__(self) -> Tuple[Any, ...]:
        return _rebuild, (type(self), self.address, self.as_keywords())  # through __init__: checked, keys loaded

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.address == other.address and self.as_keywords() == other.as_keywords()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={value!r}" for name, value in self.as_keywords().items())
        return f"{type(self).__name__}(address={self.address!r}, {values})"


def _rebuild(cls: type, address: str, keywords: Dict[str, Any]) -> DeclaredSettings:
    return cls(address, **keywords)
