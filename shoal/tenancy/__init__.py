"""Tenancy: logical clusters over one physical cluster (the multi-tenancy document, KIP-37).

- ``scope``: a request's view (tenant, name qualification) and its authorization.
- ``acl``: Kafka's ACL model and the authorizer's decision.
- ``creation``: topic creation, one decision (validation, placement, the tenant's policy) for
  CreateTopics, auto-creation and the internal topics (their names: ``internal_topics``).
"""
