"""The GPU policy as the NVIDIA device plugin's configuration.

One ConfigMap, :data:`CONFIG_NAME` in the GPU policy's ``devicePlugin.namespace`` (default
:data:`DEVICE_PLUGIN_NAMESPACE`, the NVIDIA GPU Operator's), holds two device-plugin configs
(``version: v1``), one per key. Each cluster's operator must read it: the one line of its
ClusterPolicy, ``spec.devicePlugin.config.name: fleetc-device-plugin-config`` (with
``default: exclusive``; or the device-plugin Helm chart's ``config.name``), is a compile warning
per cluster until the Fleet says it is done (cluster attribute ``device-plugin-configured:
"true"``); until then serving pods select whole GPUs, not ``-SHARED`` nodes, and the placement
counts them so (:func:`fleetc.placement.rules.slots_on`):

* ``exclusive``: no sharing; the default, for training nodes: a Training or Finetuning gang
  keeps whole GPUs;
* ``time-sliced``: ``sharing.timeSlicing`` advertising each GPU as N ``nvidia.com/gpu``
  (N = ``timeSlicing.replicas``, at most ``sharingStrategy.maxSharers`` when sharing is on,
  the same slot count the placement assumed), with ``failRequestsGreaterThanOne`` so a pod
  cannot take several slices of one GPU believing it has several GPUs.

A node picks its entry through its ``nvidia.com/device-plugin.config`` label
(``exclusive`` or ``time-sliced``; unlabelled nodes get the default). GPU feature discovery then
labels time-sliced nodes ``nvidia.com/gpu.product=<product>-SHARED``, which is what serving
pods select (see :mod:`fleetc.render.workloads`), so shared slots never land on training nodes.

``memoryManagement.defragmentThreshold`` shapes placement (the share of a cluster's GPUs fleetc
fills); ``memoryManagement.compactionStrategy`` has no Kubernetes form and is reported.
"""

from __future__ import annotations

from fleetc.errors import Diagnostic
from fleetc.model import GPU_PRODUCT_LABELS, Cluster, GPUPolicy
from fleetc.render.common import GPU_RESOURCE, NEVER_PRUNED, Obj, metadata, warning
from fleetc.render.yamlout import dump

DEVICE_PLUGIN_NAMESPACE = "gpu-operator"
CONFIG_NAME = "fleetc-device-plugin-config"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
EXCLUSIVE = "exclusive"
TIME_SLICED = "time-sliced"


def _exclusive_config() -> Obj:
    return {"version": "v1", "flags": {"migStrategy": "none"}}


def _time_sliced_config(slots: int) -> Obj:
    return {
        "version": "v1",
        "flags": {"migStrategy": "none"},
        "sharing": {
            "timeSlicing": {
                "renameByDefault": False,
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": GPU_RESOURCE, "replicas": slots}],
            },
        },
    }


def device_plugin_config(policy: GPUPolicy, cluster: Cluster, slots: int) -> list[Obj]:
    """The ConfigMap for a GPU cluster when GPUs are shared (``slots`` > 1), else nothing; and
    its Namespace, which a cluster without the GPU Operator does not have (the infra layer
    would otherwise fail on it: ``namespaces "gpu-operator" not found``). Applying it to a
    cluster that has it changes nothing but fleetc's label and annotations, and neither engine
    ever prunes it (:data:`~fleetc.render.common.NEVER_PRUNED`): the operator may live there."""
    if cluster.gpus == 0 or slots <= 1:
        return []
    home: Obj = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": metadata(policy.device_plugin_namespace, source=policy.source,
                                      field="spec.devicePlugin.namespace")}
    home["metadata"]["annotations"] |= NEVER_PRUNED
    meta = metadata(CONFIG_NAME, policy.device_plugin_namespace, policy.source)
    meta["annotations"]["fleetc.dev/node-selection"] = (
        f"label a node {CONFIG_LABEL}={EXCLUSIVE} (training, the default) or "
        f"{CONFIG_LABEL}={TIME_SLICED} (inference: each GPU shared {slots} ways)"
    )
    return [home, {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {EXCLUSIVE: dump(_exclusive_config()), TIME_SLICED: dump(_time_sliced_config(slots))},
    }]


def gpu_warnings(policy: GPUPolicy) -> list[Diagnostic]:
    if policy.compaction_strategy is None:
        return []
    return [warning(policy.source, "spec.memoryManagement.compactionStrategy",
                    "has no Kubernetes form (the device plugin does not compact GPU memory); not rendered")]


def cluster_gpu_warnings(cluster: Cluster, slots: int) -> list[Diagnostic]:
    """The ClusterPolicy line a cluster with fleetc's device-plugin config still needs, and a
    product label fleetc had to guess."""
    found = []
    if cluster.gpus > 0 and slots > 1 and not cluster.device_plugin_configured:
        found.append(warning(cluster.source, f"{cluster.source.field}.attributes",
                             f"cluster {cluster.name}: set spec.devicePlugin.config.name: {CONFIG_NAME} "
                             f"(default: {EXCLUSIVE}) in its GPU Operator ClusterPolicy, then attribute "
                             f"device-plugin-configured: \"true\": its time-sliced pods then share each GPU "
                             f"{slots} ways (until then each takes whole GPUs, and is placed so)"))
    if cluster.gpu_type and cluster.gpu_type not in GPU_PRODUCT_LABELS and cluster.gpu_product == (
            f"NVIDIA-{cluster.gpu_type.upper()}"):
        found.append(warning(cluster.source, f"{cluster.source.field}.attributes.gpu-type",
                             f"cluster {cluster.name}: pods select nvidia.com/gpu.product={cluster.gpu_product}, "
                             "a guess for this GPU type; set attribute gpu-product to the label its nodes carry"))
    return found
