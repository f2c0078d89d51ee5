"""cluster.yaml is a valid Ray cluster launcher config."""

import json
from pathlib import Path

import jsonschema
import ray
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _schema():
    return json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())


def test_cluster_yaml_matches_rays_schema():
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    jsonschema.validate(config, _schema())
    assert config["head_node_type"] in config["available_node_types"]
    assert any("pip install" in cmd and "raypass" in cmd for cmd in config["setup_commands"])


def test_schema_check_catches_a_broken_config():
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    del config["provider"]["type"]
    try:
        jsonschema.validate(config, _schema())
    except jsonschema.ValidationError as err:
        assert "type" in str(err)
    else:
        raise AssertionError("a provider without a type was accepted")
