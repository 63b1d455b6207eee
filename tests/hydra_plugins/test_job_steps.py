"""The `.hydra/` files' text from blocks rendered once per value is OmegaConf.to_yaml's, whatever came before it; an
interpolation resolves from its parse tree kept by `warm_up` as it resolves without it."""

from __future__ import annotations

from typing import Any

import omegaconf.base
import pytest
from omegaconf import OmegaConf

from hydra_plugins.sweepit._job_steps import YamlBlocks, warm_up

LONG = "a long line of words, as a help template has them, " * 4
CONFIGS: list[Any] = [  # in this order, through one cache: values equal in Python but not in YAML come after each other
    {"a": 1, "b": {"c": 1, "d": [1, 2]}},
    {"a": True, "b": {"c": True, "d": [True, 2]}},
    {"a": 1.0, "b": {"c": 1.0, "d": [1.0, 2]}},
    {"a": "1", "b": {"c": "true", "d": ["null", "2"]}},
    {"hydra": {"job": {"num": 1, "env_set": {}}, "runtime": {"output_dir": "/x/1_seed=1"}}},
    {"hydra": {"job": {"num": True, "env_set": {"A": "1"}}, "runtime": {"output_dir": "/x/1_seed=1"}}},
    {"hydra": {"job": {"num": 2, "env_set": {}}, "runtime": {"output_dir": LONG}}},
    {"hydra": {"help": {"template": LONG + "\nsecond line\n"}, "list": [{"a": 1}, {"b": [1, {"c": None}]}]}},
    {"hydra": {}},
    {1: "int key", "1": "str key", "x": {2: {3: {4: "deep"}}}},
    {"k" * 130: 1, "b": {"k" * 130: {"c": 1}}},  # keys YAML writes as complex keys, over two lines
    {"unicode": "héllo ✓", "b": {"c": "a: b", "d": "- x", "e": "#", "f": ""}},
    ["a", {"b": 1}],
    {},
]


def test_blocks_render_as_omegaconf_renders_the_whole() -> None:
    blocks = YamlBlocks()
    assert blocks.learn(OmegaConf.create(CONFIGS[0])) == OmegaConf.to_yaml(OmegaConf.create(CONFIGS[0]))
    for config in [*CONFIGS, *reversed(CONFIGS)]:
        cfg = OmegaConf.create(config)
        assert blocks.to_yaml(cfg) == OmegaConf.to_yaml(cfg), config
    assert len(blocks._blocks) > 10  # rendered from blocks, not whole


def test_interpolations_resolve_the_same_from_the_parse_trees_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(omegaconf.base, "parse", omegaconf.base.parse)  # put back after the test
    cfg = OmegaConf.create({"a": 1, "b": "${a}_${c}", "c": "x${a}", "d": "${oc.select:missing,${b}}",
                            "e": ["${b}", {"f": "${e[0]}/${a}"}], "hydra": {"h": "${b}"}})
    expected = OmegaConf.to_container(cfg, resolve=True)
    warm_up(cfg)
    assert omegaconf.base.parse.cache_info().currsize == 5  # type: ignore[attr-defined]  # the distinct texts
    for _ in range(2):
        assert OmegaConf.to_container(cfg, resolve=True) == expected
    cfg.a = 2
    assert OmegaConf.to_container(cfg, resolve=True)["e"] == ["2_x2", {"f": "2_x2/2"}]
    assert omegaconf.base.parse.cache_info().hits > 0  # type: ignore[attr-defined]
