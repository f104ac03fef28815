"""YAML as the configuration reads it: PyYAML's safe loader, whose resolver follows YAML 1.1, with YAML 1.2's
numbers and booleans. YAML 1.1's float pattern wants a dot and a signed exponent, so PyYAML reads `1e-3`, `-1e6`,
`1.0e30` and `5e+2` as strings (the papers' learning-rate grids are written that way); and it reads
`yes`/`no`/`on`/`off` as booleans, so a setting whose choices include `off` would get False. Here, as in YAML 1.2
and Python's float(), every exponent form is a float, and only true/false (in any of YAML's three cases) are
booleans; a true/false setting still takes yes/no/on/off (config/typed.py). The same loader reads config files,
`key=value` overrides and the config a run saved."""
from __future__ import annotations

import re

import yaml

BOOL, FLOAT = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:float"
YAML12_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
# YAML 1.2 core schema's float with an exponent (1e-3, -1e6, 1.0e30, 5e+2, .5e-3, 1.e3); the forms with a dot and
# no exponent, .inf and .nan, YAML 1.1's own pattern reads already
EXPONENT_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$")


class ConfigLoader(yaml.SafeLoader):
    """yaml.SafeLoader reading numbers and booleans as YAML 1.2 does."""


ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
ConfigLoader.add_implicit_resolver(BOOL, YAML12_BOOL, list("tTfF"))
ConfigLoader.add_implicit_resolver(FLOAT, EXPONENT_FLOAT, list("-+.0123456789"))


def load_yaml(text: str):
    """The YAML document in `text` as plain data, numbers and booleans read as YAML 1.2 reads them."""
    return yaml.load(text, Loader=ConfigLoader)
