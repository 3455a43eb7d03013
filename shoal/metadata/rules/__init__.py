"""The metadata rules: pure decisions, ``image + command -> Result(change, response)``.

Each function reads one ``MetadataImage`` and the command's arguments and answers the ``Change``
that carries the command out (``shoal.metadata.change``) with the caller's response, or raises
``MetadataError``. No I/O, no clock, no randomness: ids, times and random choices are arguments
(a value, or an injected callable the store supplies). A backend commits the change only if its
image is still the one decided on; otherwise the store decides again on the newer image
(``shoal.metadata.store``), so the rules never need a lock to be right.

One module per domain, as KRaft's control managers: ``topics`` (creation, deletion, partitions,
renames, leader/ISR changes), ``configs`` (topic and broker configs), ``tenants`` (logical clusters
and the delete cascade), ``users`` (SCRAM credentials and tenant membership), ``namespaces``
(KIP-37), ``acls``, ``quotas`` (client quotas), ``cluster`` (broker registrations, producer id
blocks).

Policy (names, partition counts, replication factors, config values) is the callers'; the rules
refuse what would corrupt the state (a duplicate name, an unknown topic or tenant, a user in two
tenants).
"""

from __future__ import annotations

from shoal.metadata import MetadataError, MetadataImage, TenantInfo, TopicInfo


def existing_topic(image: MetadataImage, name: str) -> TopicInfo:
    topic = image.topics.get(name)
    if topic is None:
        raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition.")
    return topic


def existing_tenant(image: MetadataImage, tenant_id: str) -> TenantInfo:
    tenant = image.tenants.get(tenant_id)
    if tenant is None:
        raise MetadataError("RESOURCE_NOT_FOUND", f"Tenant '{tenant_id}' does not exist.")
    return tenant
