"""The package's JSON schemas against their metaschemas: h3gates.core.report builds its validators without
checking the schema in every process, so a schema edit that breaks it is caught here."""

import json

import jsonschema
import pytest
import yaml

from h3gates.core import report

SCHEMAS = sorted([*report.SCHEMAS.glob("*.json"), *report.SCHEMAS.glob("*.yaml")])


def test_every_schema_is_found():
    assert {p.name.split(".")[0] for p in SCHEMAS} >= {"report", "token", "promotion", "fc2", "config", "nsight"}


@pytest.mark.parametrize("path", SCHEMAS, ids=lambda p: p.name)
def test_schema_is_valid_under_its_metaschema(path):
    sch = yaml.safe_load(path.read_text()) if path.suffix == ".yaml" else json.loads(path.read_text())
    jsonschema.validators.validator_for(sch).check_schema(sch)


def test_a_broken_schema_is_caught(tmp_path):
    bad = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "objekt"}
    with pytest.raises(jsonschema.exceptions.SchemaError):
        jsonschema.validators.validator_for(bad).check_schema(bad)


def test_the_runtime_validator_still_refuses_a_bad_report():
    with pytest.raises(report.ReportError, match="report schema"):
        report.validate({"rung": "one"}, "report")
