"""Region names are checked (issue 28): a typo must not silently pick a jurisdiction."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from fleetc.errors import Diagnostic
from fleetc.policy.load import load_files, parse
from fleetc.policy.regions import EDGE_PROVIDERS, KNOWN_REGIONS, REGIONS, table_jurisdiction
from fleetc.policy.validate import validate
from fleetc.resolve import resolve

SEED_EXAMPLES = Path("/work/shared/seed-examples")
BUNDLED = Path(__file__).parent.parent / "policies"


def fleet(*clusters: str, extra: str = "") -> str:
    body = "".join(textwrap.indent(textwrap.dedent(c), "  ") for c in clusters)
    return ("apiVersion: fleet.kurator.dev/v1alpha1\nkind: Fleet\nmetadata:\n  name: f\nspec:\n"
            f"{extra}  clusters:\n{body}")


US = "- name: virginia\n  provider: aws\n  region: us-east-1\n  attributes: {gpu-type: a100, gpu-count: '8'}\n"
TYPO = "- name: typo\n  provider: aws\n  region: eu-east-1\n  attributes: {gpu-type: a100, gpu-count: '8'}\n"
SOVEREIGN = ("apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPlatform\nmetadata:\n  name: s\n"
             "spec:\n  security:\n    dataSovereignty: true\n")


def pipeline(location: str, jurisdiction: str = "") -> str:
    stated = f"\n      jurisdiction: {jurisdiction}" if jurisdiction else ""
    return ("apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPipeline\nmetadata:\n  name: p\n"
            "spec:\n  stages:\n  - name: prep\n    type: DataProc\n    inputs:\n    - name: raw\n"
            f"      source: s3://bucket/raw/\n      location: {location}{stated}\n")


def check(*texts: str) -> list[Diagnostic]:
    documents = [d for i, text in enumerate(texts) for d in parse(text, f"p{i}.yaml")[0]]
    return validate(documents)[1]


def test_a_region_no_cloud_has_is_refused_where_it_is_written_with_the_closest_name() -> None:
    [error] = check(fleet(US, TYPO))
    assert error.format().startswith("p0.yaml:13:13: error: spec.clusters[1].region: unknown region 'eu-east-1'")
    assert "did you mean" in error.hint and "jurisdiction" in error.hint


def test_an_unknown_region_whose_jurisdiction_is_stated_is_accepted_and_keeps_it() -> None:
    text = fleet(US, TYPO + "  jurisdiction: us\n")
    documents = parse(text, "f.yaml")[0]
    policies, diagnostics = validate(documents)
    assert diagnostics == []
    assert {c.name: c.jurisdiction for c in resolve(policies, "x", ()).clusters}["typo"] == "us"


def test_a_region_the_fleet_maps_is_known() -> None:
    assert check(fleet(US, TYPO, extra="  regionJurisdictions: {eu-east-1: eu}\n")) == []


def test_an_edge_site_is_a_site_but_needs_a_stated_jurisdiction_under_data_sovereignty() -> None:
    site = "- name: factory\n  provider: kubeedge\n  region: factory-zone-1\n"
    assert check(fleet(US, site)) == []
    [error] = check(fleet(US, site), SOVEREIGN, pipeline("us-east-1"))
    assert error.field == "spec.clusters[1].region" and "data sovereignty" in error.message
    assert check(fleet(US, site + "  jurisdiction: cn\n"), SOVEREIGN, pipeline("us-east-1")) == []


def test_an_unknown_input_location_is_refused_with_the_closest_name_unless_its_jurisdiction_is_stated() -> None:
    [error] = check(fleet(US), pipeline("europe-central-1"))
    assert error.format().startswith("p1.yaml:12:17: error: spec.stages[0].inputs[0].location: "
                                     "unknown region 'europe-central-1'")
    assert "did you mean 'europe-central2'?" in error.hint
    assert check(fleet(US), pipeline("munich-dc", "eu")) == []
    assert check(fleet(US), pipeline("us-east-1")) == []


def test_a_known_region_takes_its_jurisdiction_from_the_table_per_provider() -> None:
    assert table_jurisdiction("europe-west3", "gcp") == "eu"  # the first '-' part would say europe
    assert table_jurisdiction("ap-southeast-1", "huawei") == "hk"
    assert table_jurisdiction("ap-southeast-1", "aws") == "sg"
    assert table_jurisdiction("ap-southeast-1") is None  # providers disagree: no guess
    assert table_jurisdiction("us-east-1") == "us"
    gcp = "- name: frankfurt\n  provider: gcp\n  region: europe-west3\n"
    policies, _ = validate(parse(fleet(gcp), "f.yaml")[0])
    assert resolve(policies, "x", ()).clusters[0].jurisdiction == "eu"


def test_the_table_holds_region_names_and_jurisdiction_codes() -> None:
    assert {"aws", "gcp", "azure", "aliyun", "huawei", "tencent"} <= set(REGIONS)
    assert not EDGE_PROVIDERS & set(REGIONS)
    for regions in REGIONS.values():
        for region, jurisdiction in regions.items():
            assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", region), region
            assert re.fullmatch(r"[a-z]{2}", jurisdiction), (region, jurisdiction)
    assert "eu-east-1" not in KNOWN_REGIONS


@pytest.mark.parametrize("folder", [BUNDLED, SEED_EXAMPLES / "aigc-fleet.yaml"])
def test_the_bundled_policies_and_the_seed_fleet_are_valid(folder: Path) -> None:
    files = sorted(folder.glob("*.yaml")) if folder.is_dir() else [folder]
    if not files:
        pytest.skip(f"{folder} is absent")
    assert validate(load_files(files).documents)[1] == []
