"""The region names fleetc knows, and the checks that keep a typo from moving data.

Data sovereignty rests on region names: a cluster in ``eu-east-1`` (a region no cloud has) would
otherwise be jurisdiction ``eu`` by its first part and run EU data. So every cluster's
``region`` and every input's and output's ``location`` must be a region some provider below
names, a region the Fleet maps in ``regionJurisdictions``, or (for data) the region of one of the
Fleet's clusters; a name none of these knows is refused with the closest known spelling unless
the cluster, input or output states its ``jurisdiction``. Clusters of edge providers (KubeEdge,
OpenYurt... Kurator's edge and attached clusters) run at sites, not cloud regions: their
``region`` names a site and is accepted as it is, but under data sovereignty a site (like every
unknown region) must say its jurisdiction, as no rule can derive one from a site's name.

The table maps provider -> region -> jurisdiction. A jurisdiction is the lower-case ISO 3166
code of the country whose data law applies, ``eu`` for the member states of the European Union
(one data law, the GDPR). Sources, read in December 2026: AWS "Regions and Availability Zones"
(docs.aws.amazon.com/global-infrastructure), Google Cloud "Cloud locations"
(cloud.google.com/about/locations), Azure "Azure geographies" (``az account list-locations``
names), Alibaba Cloud "Regions and zones" (help.aliyun.com, region IDs), Huawei Cloud "Regions
and Endpoints" (developer.huaweicloud.com/endpoint), Tencent Cloud "Regions and AZs"
(cloud.tencent.com/document/product/213/6091). ``kurator`` holds the region names of the
Kurator AIGC design article's own examples (/work/shared/seed-examples: ``cn-east-1``), which
fleetc accepts unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from fleetc.errors import Diagnostic, did_you_mean
from fleetc.policy.load import Document, FieldPath

if TYPE_CHECKING:
    from fleetc.policy import kinds as p
    from fleetc.policy.policyset import Parsed, PolicySet


def _same(jurisdiction: str, *regions: str) -> dict[str, str]:
    return dict.fromkeys(regions, jurisdiction)


REGIONS: Mapping[str, Mapping[str, str]] = {
    "aws": {
        **_same("us", "us-east-1", "us-east-2", "us-west-1", "us-west-2", "us-gov-east-1",
                "us-gov-west-1"),
        **_same("eu", "eu-central-1", "eu-west-1", "eu-west-3", "eu-south-1", "eu-south-2",
                "eu-north-1"),
        "eu-west-2": "gb", "eu-central-2": "ch", "af-south-1": "za", "ap-east-1": "hk",
        "ap-east-2": "tw", "ap-south-1": "in", "ap-south-2": "in", "ap-northeast-1": "jp",
        "ap-northeast-2": "kr", "ap-northeast-3": "jp", "ap-southeast-1": "sg",
        "ap-southeast-2": "au", "ap-southeast-3": "id", "ap-southeast-4": "au",
        "ap-southeast-5": "my", "ap-southeast-7": "th", "ca-central-1": "ca", "ca-west-1": "ca",
        "il-central-1": "il", "me-south-1": "bh", "me-central-1": "ae", "mx-central-1": "mx",
        "sa-east-1": "br", "cn-north-1": "cn", "cn-northwest-1": "cn",
    },
    "gcp": {
        **_same("us", "us-central1", "us-east1", "us-east4", "us-east5", "us-south1", "us-west1",
                "us-west2", "us-west3", "us-west4"),
        **_same("eu", "europe-central2", "europe-north1", "europe-north2", "europe-southwest1",
                "europe-west1", "europe-west3", "europe-west4", "europe-west8", "europe-west9",
                "europe-west10", "europe-west12"),
        "europe-west2": "gb", "europe-west6": "ch", "northamerica-northeast1": "ca",
        "northamerica-northeast2": "ca", "northamerica-south1": "mx",
        "southamerica-east1": "br", "southamerica-west1": "cl", "asia-east1": "tw",
        "asia-east2": "hk", "asia-northeast1": "jp", "asia-northeast2": "jp",
        "asia-northeast3": "kr", "asia-south1": "in", "asia-south2": "in",
        "asia-southeast1": "sg", "asia-southeast2": "id", "australia-southeast1": "au",
        "australia-southeast2": "au", "me-central1": "qa", "me-central2": "sa", "me-west1": "il",
        "africa-south1": "za",
    },
    "azure": {
        **_same("us", "eastus", "eastus2", "centralus", "northcentralus", "southcentralus",
                "westcentralus", "westus", "westus2", "westus3"),
        **_same("eu", "northeurope", "westeurope", "francecentral", "francesouth",
                "germanywestcentral", "germanynorth", "swedencentral", "italynorth",
                "polandcentral", "spaincentral"),
        **_same("cn", "chinanorth", "chinanorth2", "chinanorth3", "chinaeast", "chinaeast2",
                "chinaeast3"),
        "uksouth": "gb", "ukwest": "gb", "switzerlandnorth": "ch", "switzerlandwest": "ch",
        "norwayeast": "no", "norwaywest": "no", "canadacentral": "ca", "canadaeast": "ca",
        "brazilsouth": "br", "mexicocentral": "mx", "eastasia": "hk", "southeastasia": "sg",
        "japaneast": "jp", "japanwest": "jp", "koreacentral": "kr", "koreasouth": "kr",
        "australiaeast": "au", "australiasoutheast": "au", "australiacentral": "au",
        "centralindia": "in", "southindia": "in", "westindia": "in", "uaenorth": "ae",
        "uaecentral": "ae", "qatarcentral": "qa", "israelcentral": "il",
        "southafricanorth": "za", "southafricawest": "za",
    },
    "aliyun": {
        **_same("cn", "cn-qingdao", "cn-beijing", "cn-zhangjiakou", "cn-huhehaote",
                "cn-wulanchabu", "cn-hangzhou", "cn-shanghai", "cn-nanjing", "cn-shenzhen",
                "cn-heyuan", "cn-guangzhou", "cn-chengdu", "cn-shanghai-finance-1"),
        "cn-hongkong": "hk", "ap-northeast-1": "jp", "ap-northeast-2": "kr",
        "ap-southeast-1": "sg", "ap-southeast-3": "my", "ap-southeast-5": "id",
        "ap-southeast-6": "ph", "ap-southeast-7": "th", "us-east-1": "us", "us-west-1": "us",
        "eu-central-1": "eu", "eu-west-1": "gb", "me-east-1": "ae", "me-central-1": "sa",
        "na-south-1": "mx",
    },
    "huawei": {
        **_same("cn", "cn-north-1", "cn-north-2", "cn-north-4", "cn-north-9", "cn-east-2",
                "cn-east-3", "cn-south-1", "cn-southwest-2"),
        "ap-southeast-1": "hk", "ap-southeast-2": "th", "ap-southeast-3": "sg",
        "ap-southeast-4": "id", "af-south-1": "za", "sa-brazil-1": "br", "la-north-2": "mx",
        "la-south-2": "cl", "na-mexico-1": "mx", "tr-west-1": "tr", "me-east-1": "sa",
        "eu-west-0": "eu", "eu-west-101": "eu",
    },
    "tencent": {
        **_same("cn", "ap-guangzhou", "ap-shanghai", "ap-nanjing", "ap-beijing", "ap-chengdu",
                "ap-chongqing", "ap-shanghai-fsi", "ap-shenzhen-fsi", "ap-beijing-fsi"),
        "ap-hongkong": "hk", "ap-singapore": "sg", "ap-jakarta": "id", "ap-seoul": "kr",
        "ap-tokyo": "jp", "ap-mumbai": "in", "ap-bangkok": "th", "na-siliconvalley": "us",
        "na-ashburn": "us", "na-toronto": "ca", "sa-saopaulo": "br", "eu-frankfurt": "eu",
    },
    "kurator": {"cn-east-1": "cn"},
}

#: Providers whose clusters run at sites rather than in a cloud's regions (Kurator's edge and
#: attached clusters): their ``region`` is a site name, accepted as it is.
EDGE_PROVIDERS = frozenset({"kubeedge", "openyurt", "superedge", "edge", "onprem", "on-prem",
                            "baremetal", "attached"})

#: Every region name the table knows, whichever provider.
KNOWN_REGIONS = frozenset(region for regions in REGIONS.values() for region in regions)


def table_jurisdiction(region: str, provider: str | None = None) -> str | None:
    """The jurisdiction the table gives ``region``: the provider's own entry, else the one
    every provider naming the region agrees on; None when the table does not know it (or two
    providers disagree: ``eu-west-1`` is Ireland for AWS and London for Alibaba Cloud)."""
    own = REGIONS.get(provider or "", {}).get(region)
    if own is not None:
        return own
    found = {regions[region] for regions in REGIONS.values() if region in regions}
    return found.pop() if len(found) == 1 else None


def region_checks(policies: PolicySet, sovereign: frozenset[str]) -> Iterator[Diagnostic]:
    """Every cluster's region and every input's and output's location is known, or states its
    jurisdiction (see the module's docstring). ``sovereign``: the pipelines a platform with
    ``dataSovereignty`` governs (any such pipeline puts every cluster under the rule)."""
    if not policies.fleets:
        return
    fleet = policies.fleets[0]
    declared = frozenset(fleet.obj.spec.regionJurisdictions or {})
    yield from _cluster_checks(fleet, declared, strict=bool(sovereign))
    sites = frozenset(c.region for c in fleet.obj.spec.clusters)
    for pipeline in policies.pipelines:
        yield from _location_checks(pipeline, declared | sites)


def _cluster_checks(fleet: Parsed[p.Fleet], declared: frozenset[str], *,
                    strict: bool) -> Iterator[Diagnostic]:
    for i, cluster in enumerate(fleet.obj.spec.clusters):
        if cluster.jurisdiction or cluster.region in declared or cluster.region in KNOWN_REGIONS:
            continue
        path: FieldPath = ("spec", "clusters", i, "region")
        if cluster.provider.lower() in EDGE_PROVIDERS:
            if strict:
                yield fleet.doc.diagnostic(
                    path, f"data sovereignty: the jurisdiction of site '{cluster.region}' "
                          f"(cluster '{cluster.name}', provider {cluster.provider}) cannot be "
                          "derived from its name",
                    hint=f"state spec.clusters[{i}].jurisdiction, or map the site in "
                         "spec.regionJurisdictions")
            continue
        yield _unknown(fleet.doc, path, cluster.region, declared,
                       f"spec.clusters[{i}].jurisdiction", strict=strict)


def _location_checks(pipeline: Parsed[p.AIGCPipeline], known: frozenset[str]) -> Iterator[Diagnostic]:
    for i, stage in enumerate(pipeline.obj.spec.stages):
        sides: tuple[tuple[str, Sequence[p.StageInput | p.StageOutput]], ...] = (
            ("inputs", stage.inputs or []), ("outputs", stage.outputs or []))
        for side, items in sides:
            for j, item in enumerate(items):
                where = item.location
                if where is None or item.jurisdiction or where in known or where in KNOWN_REGIONS:
                    continue
                path: FieldPath = ("spec", "stages", i, side, j, "location")
                yield _unknown(pipeline.doc, path, where, known,
                               f"spec.stages[{i}].{side}[{j}].jurisdiction", strict=False)


def _unknown(doc: Document, path: FieldPath, region: str, known: frozenset[str],
             jurisdiction_field: str, *, strict: bool) -> Diagnostic:
    """The error for a region no provider, and nothing in the fleet, knows."""
    guess = did_you_mean(region, KNOWN_REGIONS | known)
    rule = "data sovereignty: " if strict else ""
    return doc.diagnostic(
        path, f"{rule}unknown region '{region}': no provider fleetc knows has it, and the "
              "Fleet does not map it in regionJurisdictions, so its jurisdiction would be guessed "
              "from its name",
        hint=(f"{guess} " if guess else "") + f"If the name is right, state {jurisdiction_field} "
             "or map the region in the Fleet's spec.regionJurisdictions")
