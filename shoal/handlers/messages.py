"""The request and response types of the APIs Shoal serves, for the type checker: one union of
kio's per-version classes each, over the versions its handler declares (``@api(key, min, max)``,
``shoal.handlers.registry``). A handler is ``async def handle(ctx: RequestContext, req: XRequest)
-> XResponse``; a field some of its versions lack is read with ``getattr``.

For annotations only: everything is under ``TYPE_CHECKING`` (importing every version's module at
run time would load all of kio's schemas). Below the guard, generated from the handlers' ranges:
``python tests/test_typing.py`` writes it, and its tests fail when it is not current.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import kio.schema.produce.v3.request
    import kio.schema.produce.v4.request
    import kio.schema.produce.v5.request
    import kio.schema.produce.v6.request
    import kio.schema.produce.v7.request
    import kio.schema.produce.v8.request
    import kio.schema.produce.v9.request
    import kio.schema.produce.v10.request
    import kio.schema.produce.v11.request
    import kio.schema.produce.v12.request
    import kio.schema.produce.v3.response
    import kio.schema.produce.v4.response
    import kio.schema.produce.v5.response
    import kio.schema.produce.v6.response
    import kio.schema.produce.v7.response
    import kio.schema.produce.v8.response
    import kio.schema.produce.v9.response
    import kio.schema.produce.v10.response
    import kio.schema.produce.v11.response
    import kio.schema.produce.v12.response
    import kio.schema.fetch.v4.request
    import kio.schema.fetch.v5.request
    import kio.schema.fetch.v6.request
    import kio.schema.fetch.v7.request
    import kio.schema.fetch.v8.request
    import kio.schema.fetch.v9.request
    import kio.schema.fetch.v10.request
    import kio.schema.fetch.v11.request
    import kio.schema.fetch.v12.request
    import kio.schema.fetch.v13.request
    import kio.schema.fetch.v14.request
    import kio.schema.fetch.v15.request
    import kio.schema.fetch.v16.request
    import kio.schema.fetch.v17.request
    import kio.schema.fetch.v18.request
    import kio.schema.fetch.v4.response
    import kio.schema.fetch.v5.response
    import kio.schema.fetch.v6.response
    import kio.schema.fetch.v7.response
    import kio.schema.fetch.v8.response
    import kio.schema.fetch.v9.response
    import kio.schema.fetch.v10.response
    import kio.schema.fetch.v11.response
    import kio.schema.fetch.v12.response
    import kio.schema.fetch.v13.response
    import kio.schema.fetch.v14.response
    import kio.schema.fetch.v15.response
    import kio.schema.fetch.v16.response
    import kio.schema.fetch.v17.response
    import kio.schema.fetch.v18.response
    import kio.schema.list_offsets.v1.request
    import kio.schema.list_offsets.v2.request
    import kio.schema.list_offsets.v3.request
    import kio.schema.list_offsets.v4.request
    import kio.schema.list_offsets.v5.request
    import kio.schema.list_offsets.v6.request
    import kio.schema.list_offsets.v7.request
    import kio.schema.list_offsets.v8.request
    import kio.schema.list_offsets.v9.request
    import kio.schema.list_offsets.v10.request
    import kio.schema.list_offsets.v1.response
    import kio.schema.list_offsets.v2.response
    import kio.schema.list_offsets.v3.response
    import kio.schema.list_offsets.v4.response
    import kio.schema.list_offsets.v5.response
    import kio.schema.list_offsets.v6.response
    import kio.schema.list_offsets.v7.response
    import kio.schema.list_offsets.v8.response
    import kio.schema.list_offsets.v9.response
    import kio.schema.list_offsets.v10.response
    import kio.schema.metadata.v0.request
    import kio.schema.metadata.v1.request
    import kio.schema.metadata.v2.request
    import kio.schema.metadata.v3.request
    import kio.schema.metadata.v4.request
    import kio.schema.metadata.v5.request
    import kio.schema.metadata.v6.request
    import kio.schema.metadata.v7.request
    import kio.schema.metadata.v8.request
    import kio.schema.metadata.v9.request
    import kio.schema.metadata.v10.request
    import kio.schema.metadata.v11.request
    import kio.schema.metadata.v12.request
    import kio.schema.metadata.v13.request
    import kio.schema.metadata.v0.response
    import kio.schema.metadata.v1.response
    import kio.schema.metadata.v2.response
    import kio.schema.metadata.v3.response
    import kio.schema.metadata.v4.response
    import kio.schema.metadata.v5.response
    import kio.schema.metadata.v6.response
    import kio.schema.metadata.v7.response
    import kio.schema.metadata.v8.response
    import kio.schema.metadata.v9.response
    import kio.schema.metadata.v10.response
    import kio.schema.metadata.v11.response
    import kio.schema.metadata.v12.response
    import kio.schema.metadata.v13.response
    import kio.schema.offset_commit.v2.request
    import kio.schema.offset_commit.v3.request
    import kio.schema.offset_commit.v4.request
    import kio.schema.offset_commit.v5.request
    import kio.schema.offset_commit.v6.request
    import kio.schema.offset_commit.v7.request
    import kio.schema.offset_commit.v8.request
    import kio.schema.offset_commit.v9.request
    import kio.schema.offset_commit.v10.request
    import kio.schema.offset_commit.v2.response
    import kio.schema.offset_commit.v3.response
    import kio.schema.offset_commit.v4.response
    import kio.schema.offset_commit.v5.response
    import kio.schema.offset_commit.v6.response
    import kio.schema.offset_commit.v7.response
    import kio.schema.offset_commit.v8.response
    import kio.schema.offset_commit.v9.response
    import kio.schema.offset_commit.v10.response
    import kio.schema.offset_fetch.v1.request
    import kio.schema.offset_fetch.v2.request
    import kio.schema.offset_fetch.v3.request
    import kio.schema.offset_fetch.v4.request
    import kio.schema.offset_fetch.v5.request
    import kio.schema.offset_fetch.v6.request
    import kio.schema.offset_fetch.v7.request
    import kio.schema.offset_fetch.v8.request
    import kio.schema.offset_fetch.v9.request
    import kio.schema.offset_fetch.v10.request
    import kio.schema.offset_fetch.v1.response
    import kio.schema.offset_fetch.v2.response
    import kio.schema.offset_fetch.v3.response
    import kio.schema.offset_fetch.v4.response
    import kio.schema.offset_fetch.v5.response
    import kio.schema.offset_fetch.v6.response
    import kio.schema.offset_fetch.v7.response
    import kio.schema.offset_fetch.v8.response
    import kio.schema.offset_fetch.v9.response
    import kio.schema.offset_fetch.v10.response
    import kio.schema.find_coordinator.v0.request
    import kio.schema.find_coordinator.v1.request
    import kio.schema.find_coordinator.v2.request
    import kio.schema.find_coordinator.v3.request
    import kio.schema.find_coordinator.v4.request
    import kio.schema.find_coordinator.v5.request
    import kio.schema.find_coordinator.v6.request
    import kio.schema.find_coordinator.v0.response
    import kio.schema.find_coordinator.v1.response
    import kio.schema.find_coordinator.v2.response
    import kio.schema.find_coordinator.v3.response
    import kio.schema.find_coordinator.v4.response
    import kio.schema.find_coordinator.v5.response
    import kio.schema.find_coordinator.v6.response
    import kio.schema.join_group.v0.request
    import kio.schema.join_group.v1.request
    import kio.schema.join_group.v2.request
    import kio.schema.join_group.v3.request
    import kio.schema.join_group.v4.request
    import kio.schema.join_group.v5.request
    import kio.schema.join_group.v6.request
    import kio.schema.join_group.v7.request
    import kio.schema.join_group.v8.request
    import kio.schema.join_group.v9.request
    import kio.schema.join_group.v0.response
    import kio.schema.join_group.v1.response
    import kio.schema.join_group.v2.response
    import kio.schema.join_group.v3.response
    import kio.schema.join_group.v4.response
    import kio.schema.join_group.v5.response
    import kio.schema.join_group.v6.response
    import kio.schema.join_group.v7.response
    import kio.schema.join_group.v8.response
    import kio.schema.join_group.v9.response
    import kio.schema.heartbeat.v0.request
    import kio.schema.heartbeat.v1.request
    import kio.schema.heartbeat.v2.request
    import kio.schema.heartbeat.v3.request
    import kio.schema.heartbeat.v4.request
    import kio.schema.heartbeat.v0.response
    import kio.schema.heartbeat.v1.response
    import kio.schema.heartbeat.v2.response
    import kio.schema.heartbeat.v3.response
    import kio.schema.heartbeat.v4.response
    import kio.schema.leave_group.v0.request
    import kio.schema.leave_group.v1.request
    import kio.schema.leave_group.v2.request
    import kio.schema.leave_group.v3.request
    import kio.schema.leave_group.v4.request
    import kio.schema.leave_group.v5.request
    import kio.schema.leave_group.v0.response
    import kio.schema.leave_group.v1.response
    import kio.schema.leave_group.v2.response
    import kio.schema.leave_group.v3.response
    import kio.schema.leave_group.v4.response
    import kio.schema.leave_group.v5.response
    import kio.schema.sync_group.v0.request
    import kio.schema.sync_group.v1.request
    import kio.schema.sync_group.v2.request
    import kio.schema.sync_group.v3.request
    import kio.schema.sync_group.v4.request
    import kio.schema.sync_group.v5.request
    import kio.schema.sync_group.v0.response
    import kio.schema.sync_group.v1.response
    import kio.schema.sync_group.v2.response
    import kio.schema.sync_group.v3.response
    import kio.schema.sync_group.v4.response
    import kio.schema.sync_group.v5.response
    import kio.schema.describe_groups.v0.request
    import kio.schema.describe_groups.v1.request
    import kio.schema.describe_groups.v2.request
    import kio.schema.describe_groups.v3.request
    import kio.schema.describe_groups.v4.request
    import kio.schema.describe_groups.v5.request
    import kio.schema.describe_groups.v6.request
    import kio.schema.describe_groups.v0.response
    import kio.schema.describe_groups.v1.response
    import kio.schema.describe_groups.v2.response
    import kio.schema.describe_groups.v3.response
    import kio.schema.describe_groups.v4.response
    import kio.schema.describe_groups.v5.response
    import kio.schema.describe_groups.v6.response
    import kio.schema.list_groups.v0.request
    import kio.schema.list_groups.v1.request
    import kio.schema.list_groups.v2.request
    import kio.schema.list_groups.v3.request
    import kio.schema.list_groups.v4.request
    import kio.schema.list_groups.v5.request
    import kio.schema.list_groups.v0.response
    import kio.schema.list_groups.v1.response
    import kio.schema.list_groups.v2.response
    import kio.schema.list_groups.v3.response
    import kio.schema.list_groups.v4.response
    import kio.schema.list_groups.v5.response
    import kio.schema.sasl_handshake.v0.request
    import kio.schema.sasl_handshake.v1.request
    import kio.schema.sasl_handshake.v0.response
    import kio.schema.sasl_handshake.v1.response
    import kio.schema.api_versions.v0.request
    import kio.schema.api_versions.v1.request
    import kio.schema.api_versions.v2.request
    import kio.schema.api_versions.v3.request
    import kio.schema.api_versions.v4.request
    import kio.schema.api_versions.v0.response
    import kio.schema.api_versions.v1.response
    import kio.schema.api_versions.v2.response
    import kio.schema.api_versions.v3.response
    import kio.schema.api_versions.v4.response
    import kio.schema.create_topics.v2.request
    import kio.schema.create_topics.v3.request
    import kio.schema.create_topics.v4.request
    import kio.schema.create_topics.v5.request
    import kio.schema.create_topics.v6.request
    import kio.schema.create_topics.v7.request
    import kio.schema.create_topics.v2.response
    import kio.schema.create_topics.v3.response
    import kio.schema.create_topics.v4.response
    import kio.schema.create_topics.v5.response
    import kio.schema.create_topics.v6.response
    import kio.schema.create_topics.v7.response
    import kio.schema.delete_topics.v1.request
    import kio.schema.delete_topics.v2.request
    import kio.schema.delete_topics.v3.request
    import kio.schema.delete_topics.v4.request
    import kio.schema.delete_topics.v5.request
    import kio.schema.delete_topics.v6.request
    import kio.schema.delete_topics.v1.response
    import kio.schema.delete_topics.v2.response
    import kio.schema.delete_topics.v3.response
    import kio.schema.delete_topics.v4.response
    import kio.schema.delete_topics.v5.response
    import kio.schema.delete_topics.v6.response
    import kio.schema.delete_records.v0.request
    import kio.schema.delete_records.v1.request
    import kio.schema.delete_records.v2.request
    import kio.schema.delete_records.v0.response
    import kio.schema.delete_records.v1.response
    import kio.schema.delete_records.v2.response
    import kio.schema.init_producer_id.v0.request
    import kio.schema.init_producer_id.v1.request
    import kio.schema.init_producer_id.v2.request
    import kio.schema.init_producer_id.v3.request
    import kio.schema.init_producer_id.v4.request
    import kio.schema.init_producer_id.v5.request
    import kio.schema.init_producer_id.v0.response
    import kio.schema.init_producer_id.v1.response
    import kio.schema.init_producer_id.v2.response
    import kio.schema.init_producer_id.v3.response
    import kio.schema.init_producer_id.v4.response
    import kio.schema.init_producer_id.v5.response
    import kio.schema.offset_for_leader_epoch.v2.request
    import kio.schema.offset_for_leader_epoch.v3.request
    import kio.schema.offset_for_leader_epoch.v4.request
    import kio.schema.offset_for_leader_epoch.v2.response
    import kio.schema.offset_for_leader_epoch.v3.response
    import kio.schema.offset_for_leader_epoch.v4.response
    import kio.schema.add_partitions_to_txn.v0.request
    import kio.schema.add_partitions_to_txn.v1.request
    import kio.schema.add_partitions_to_txn.v2.request
    import kio.schema.add_partitions_to_txn.v3.request
    import kio.schema.add_partitions_to_txn.v4.request
    import kio.schema.add_partitions_to_txn.v5.request
    import kio.schema.add_partitions_to_txn.v0.response
    import kio.schema.add_partitions_to_txn.v1.response
    import kio.schema.add_partitions_to_txn.v2.response
    import kio.schema.add_partitions_to_txn.v3.response
    import kio.schema.add_partitions_to_txn.v4.response
    import kio.schema.add_partitions_to_txn.v5.response
    import kio.schema.add_offsets_to_txn.v0.request
    import kio.schema.add_offsets_to_txn.v1.request
    import kio.schema.add_offsets_to_txn.v2.request
    import kio.schema.add_offsets_to_txn.v3.request
    import kio.schema.add_offsets_to_txn.v4.request
    import kio.schema.add_offsets_to_txn.v0.response
    import kio.schema.add_offsets_to_txn.v1.response
    import kio.schema.add_offsets_to_txn.v2.response
    import kio.schema.add_offsets_to_txn.v3.response
    import kio.schema.add_offsets_to_txn.v4.response
    import kio.schema.end_txn.v0.request
    import kio.schema.end_txn.v1.request
    import kio.schema.end_txn.v2.request
    import kio.schema.end_txn.v3.request
    import kio.schema.end_txn.v4.request
    import kio.schema.end_txn.v5.request
    import kio.schema.end_txn.v0.response
    import kio.schema.end_txn.v1.response
    import kio.schema.end_txn.v2.response
    import kio.schema.end_txn.v3.response
    import kio.schema.end_txn.v4.response
    import kio.schema.end_txn.v5.response
    import kio.schema.write_txn_markers.v1.request
    import kio.schema.write_txn_markers.v2.request
    import kio.schema.write_txn_markers.v1.response
    import kio.schema.write_txn_markers.v2.response
    import kio.schema.txn_offset_commit.v0.request
    import kio.schema.txn_offset_commit.v1.request
    import kio.schema.txn_offset_commit.v2.request
    import kio.schema.txn_offset_commit.v3.request
    import kio.schema.txn_offset_commit.v4.request
    import kio.schema.txn_offset_commit.v5.request
    import kio.schema.txn_offset_commit.v0.response
    import kio.schema.txn_offset_commit.v1.response
    import kio.schema.txn_offset_commit.v2.response
    import kio.schema.txn_offset_commit.v3.response
    import kio.schema.txn_offset_commit.v4.response
    import kio.schema.txn_offset_commit.v5.response
    import kio.schema.describe_acls.v1.request
    import kio.schema.describe_acls.v2.request
    import kio.schema.describe_acls.v3.request
    import kio.schema.describe_acls.v1.response
    import kio.schema.describe_acls.v2.response
    import kio.schema.describe_acls.v3.response
    import kio.schema.create_acls.v1.request
    import kio.schema.create_acls.v2.request
    import kio.schema.create_acls.v3.request
    import kio.schema.create_acls.v1.response
    import kio.schema.create_acls.v2.response
    import kio.schema.create_acls.v3.response
    import kio.schema.delete_acls.v1.request
    import kio.schema.delete_acls.v2.request
    import kio.schema.delete_acls.v3.request
    import kio.schema.delete_acls.v1.response
    import kio.schema.delete_acls.v2.response
    import kio.schema.delete_acls.v3.response
    import kio.schema.describe_configs.v1.request
    import kio.schema.describe_configs.v2.request
    import kio.schema.describe_configs.v3.request
    import kio.schema.describe_configs.v4.request
    import kio.schema.describe_configs.v1.response
    import kio.schema.describe_configs.v2.response
    import kio.schema.describe_configs.v3.response
    import kio.schema.describe_configs.v4.response
    import kio.schema.alter_configs.v0.request
    import kio.schema.alter_configs.v1.request
    import kio.schema.alter_configs.v2.request
    import kio.schema.alter_configs.v0.response
    import kio.schema.alter_configs.v1.response
    import kio.schema.alter_configs.v2.response
    import kio.schema.describe_log_dirs.v1.request
    import kio.schema.describe_log_dirs.v2.request
    import kio.schema.describe_log_dirs.v3.request
    import kio.schema.describe_log_dirs.v4.request
    import kio.schema.describe_log_dirs.v1.response
    import kio.schema.describe_log_dirs.v2.response
    import kio.schema.describe_log_dirs.v3.response
    import kio.schema.describe_log_dirs.v4.response
    import kio.schema.sasl_authenticate.v0.request
    import kio.schema.sasl_authenticate.v1.request
    import kio.schema.sasl_authenticate.v2.request
    import kio.schema.sasl_authenticate.v0.response
    import kio.schema.sasl_authenticate.v1.response
    import kio.schema.sasl_authenticate.v2.response
    import kio.schema.create_partitions.v0.request
    import kio.schema.create_partitions.v1.request
    import kio.schema.create_partitions.v2.request
    import kio.schema.create_partitions.v3.request
    import kio.schema.create_partitions.v0.response
    import kio.schema.create_partitions.v1.response
    import kio.schema.create_partitions.v2.response
    import kio.schema.create_partitions.v3.response
    import kio.schema.delete_groups.v0.request
    import kio.schema.delete_groups.v1.request
    import kio.schema.delete_groups.v2.request
    import kio.schema.delete_groups.v0.response
    import kio.schema.delete_groups.v1.response
    import kio.schema.delete_groups.v2.response
    import kio.schema.elect_leaders.v0.request
    import kio.schema.elect_leaders.v1.request
    import kio.schema.elect_leaders.v2.request
    import kio.schema.elect_leaders.v0.response
    import kio.schema.elect_leaders.v1.response
    import kio.schema.elect_leaders.v2.response
    import kio.schema.incremental_alter_configs.v0.request
    import kio.schema.incremental_alter_configs.v1.request
    import kio.schema.incremental_alter_configs.v0.response
    import kio.schema.incremental_alter_configs.v1.response
    import kio.schema.alter_partition_reassignments.v0.request
    import kio.schema.alter_partition_reassignments.v0.response
    import kio.schema.list_partition_reassignments.v0.request
    import kio.schema.list_partition_reassignments.v0.response
    import kio.schema.offset_delete.v0.request
    import kio.schema.offset_delete.v0.response
    import kio.schema.describe_client_quotas.v0.request
    import kio.schema.describe_client_quotas.v1.request
    import kio.schema.describe_client_quotas.v0.response
    import kio.schema.describe_client_quotas.v1.response
    import kio.schema.alter_client_quotas.v0.request
    import kio.schema.alter_client_quotas.v1.request
    import kio.schema.alter_client_quotas.v0.response
    import kio.schema.alter_client_quotas.v1.response
    import kio.schema.describe_user_scram_credentials.v0.request
    import kio.schema.describe_user_scram_credentials.v0.response
    import kio.schema.alter_user_scram_credentials.v0.request
    import kio.schema.alter_user_scram_credentials.v0.response
    import kio.schema.update_features.v0.request
    import kio.schema.update_features.v1.request
    import kio.schema.update_features.v0.response
    import kio.schema.update_features.v1.response
    import kio.schema.describe_cluster.v0.request
    import kio.schema.describe_cluster.v1.request
    import kio.schema.describe_cluster.v2.request
    import kio.schema.describe_cluster.v0.response
    import kio.schema.describe_cluster.v1.response
    import kio.schema.describe_cluster.v2.response
    import kio.schema.describe_producers.v0.request
    import kio.schema.describe_producers.v0.response
    import kio.schema.describe_transactions.v0.request
    import kio.schema.describe_transactions.v0.response
    import kio.schema.list_transactions.v0.request
    import kio.schema.list_transactions.v1.request
    import kio.schema.list_transactions.v2.request
    import kio.schema.list_transactions.v0.response
    import kio.schema.list_transactions.v1.response
    import kio.schema.list_transactions.v2.response
    import kio.schema.consumer_group_heartbeat.v0.request
    import kio.schema.consumer_group_heartbeat.v1.request
    import kio.schema.consumer_group_heartbeat.v0.response
    import kio.schema.consumer_group_heartbeat.v1.response
    import kio.schema.consumer_group_describe.v0.request
    import kio.schema.consumer_group_describe.v1.request
    import kio.schema.consumer_group_describe.v0.response
    import kio.schema.consumer_group_describe.v1.response
    import kio.schema.describe_topic_partitions.v0.request
    import kio.schema.describe_topic_partitions.v0.response

    ProduceRequest = (
        kio.schema.produce.v3.request.ProduceRequest
        | kio.schema.produce.v4.request.ProduceRequest
        | kio.schema.produce.v5.request.ProduceRequest
        | kio.schema.produce.v6.request.ProduceRequest
        | kio.schema.produce.v7.request.ProduceRequest
        | kio.schema.produce.v8.request.ProduceRequest
        | kio.schema.produce.v9.request.ProduceRequest
        | kio.schema.produce.v10.request.ProduceRequest
        | kio.schema.produce.v11.request.ProduceRequest
        | kio.schema.produce.v12.request.ProduceRequest
    )
    ProduceResponse = (
        kio.schema.produce.v3.response.ProduceResponse
        | kio.schema.produce.v4.response.ProduceResponse
        | kio.schema.produce.v5.response.ProduceResponse
        | kio.schema.produce.v6.response.ProduceResponse
        | kio.schema.produce.v7.response.ProduceResponse
        | kio.schema.produce.v8.response.ProduceResponse
        | kio.schema.produce.v9.response.ProduceResponse
        | kio.schema.produce.v10.response.ProduceResponse
        | kio.schema.produce.v11.response.ProduceResponse
        | kio.schema.produce.v12.response.ProduceResponse
    )
    FetchRequest = (
        kio.schema.fetch.v4.request.FetchRequest
        | kio.schema.fetch.v5.request.FetchRequest
        | kio.schema.fetch.v6.request.FetchRequest
        | kio.schema.fetch.v7.request.FetchRequest
        | kio.schema.fetch.v8.request.FetchRequest
        | kio.schema.fetch.v9.request.FetchRequest
        | kio.schema.fetch.v10.request.FetchRequest
        | kio.schema.fetch.v11.request.FetchRequest
        | kio.schema.fetch.v12.request.FetchRequest
        | kio.schema.fetch.v13.request.FetchRequest
        | kio.schema.fetch.v14.request.FetchRequest
        | kio.schema.fetch.v15.request.FetchRequest
        | kio.schema.fetch.v16.request.FetchRequest
        | kio.schema.fetch.v17.request.FetchRequest
        | kio.schema.fetch.v18.request.FetchRequest
    )
    FetchResponse = (
        kio.schema.fetch.v4.response.FetchResponse
        | kio.schema.fetch.v5.response.FetchResponse
        | kio.schema.fetch.v6.response.FetchResponse
        | kio.schema.fetch.v7.response.FetchResponse
        | kio.schema.fetch.v8.response.FetchResponse
        | kio.schema.fetch.v9.response.FetchResponse
        | kio.schema.fetch.v10.response.FetchResponse
        | kio.schema.fetch.v11.response.FetchResponse
        | kio.schema.fetch.v12.response.FetchResponse
        | kio.schema.fetch.v13.response.FetchResponse
        | kio.schema.fetch.v14.response.FetchResponse
        | kio.schema.fetch.v15.response.FetchResponse
        | kio.schema.fetch.v16.response.FetchResponse
        | kio.schema.fetch.v17.response.FetchResponse
        | kio.schema.fetch.v18.response.FetchResponse
    )
    ListOffsetsRequest = (
        kio.schema.list_offsets.v1.request.ListOffsetsRequest
        | kio.schema.list_offsets.v2.request.ListOffsetsRequest
        | kio.schema.list_offsets.v3.request.ListOffsetsRequest
        | kio.schema.list_offsets.v4.request.ListOffsetsRequest
        | kio.schema.list_offsets.v5.request.ListOffsetsRequest
        | kio.schema.list_offsets.v6.request.ListOffsetsRequest
        | kio.schema.list_offsets.v7.request.ListOffsetsRequest
        | kio.schema.list_offsets.v8.request.ListOffsetsRequest
        | kio.schema.list_offsets.v9.request.ListOffsetsRequest
        | kio.schema.list_offsets.v10.request.ListOffsetsRequest
    )
    ListOffsetsResponse = (
        kio.schema.list_offsets.v1.response.ListOffsetsResponse
        | kio.schema.list_offsets.v2.response.ListOffsetsResponse
        | kio.schema.list_offsets.v3.response.ListOffsetsResponse
        | kio.schema.list_offsets.v4.response.ListOffsetsResponse
        | kio.schema.list_offsets.v5.response.ListOffsetsResponse
        | kio.schema.list_offsets.v6.response.ListOffsetsResponse
        | kio.schema.list_offsets.v7.response.ListOffsetsResponse
        | kio.schema.list_offsets.v8.response.ListOffsetsResponse
        | kio.schema.list_offsets.v9.response.ListOffsetsResponse
        | kio.schema.list_offsets.v10.response.ListOffsetsResponse
    )
    MetadataRequest = (
        kio.schema.metadata.v0.request.MetadataRequest
        | kio.schema.metadata.v1.request.MetadataRequest
        | kio.schema.metadata.v2.request.MetadataRequest
        | kio.schema.metadata.v3.request.MetadataRequest
        | kio.schema.metadata.v4.request.MetadataRequest
        | kio.schema.metadata.v5.request.MetadataRequest
        | kio.schema.metadata.v6.request.MetadataRequest
        | kio.schema.metadata.v7.request.MetadataRequest
        | kio.schema.metadata.v8.request.MetadataRequest
        | kio.schema.metadata.v9.request.MetadataRequest
        | kio.schema.metadata.v10.request.MetadataRequest
        | kio.schema.metadata.v11.request.MetadataRequest
        | kio.schema.metadata.v12.request.MetadataRequest
        | kio.schema.metadata.v13.request.MetadataRequest
    )
    MetadataResponse = (
        kio.schema.metadata.v0.response.MetadataResponse
        | kio.schema.metadata.v1.response.MetadataResponse
        | kio.schema.metadata.v2.response.MetadataResponse
        | kio.schema.metadata.v3.response.MetadataResponse
        | kio.schema.metadata.v4.response.MetadataResponse
        | kio.schema.metadata.v5.response.MetadataResponse
        | kio.schema.metadata.v6.response.MetadataResponse
        | kio.schema.metadata.v7.response.MetadataResponse
        | kio.schema.metadata.v8.response.MetadataResponse
        | kio.schema.metadata.v9.response.MetadataResponse
        | kio.schema.metadata.v10.response.MetadataResponse
        | kio.schema.metadata.v11.response.MetadataResponse
        | kio.schema.metadata.v12.response.MetadataResponse
        | kio.schema.metadata.v13.response.MetadataResponse
    )
    OffsetCommitRequest = (
        kio.schema.offset_commit.v2.request.OffsetCommitRequest
        | kio.schema.offset_commit.v3.request.OffsetCommitRequest
        | kio.schema.offset_commit.v4.request.OffsetCommitRequest
        | kio.schema.offset_commit.v5.request.OffsetCommitRequest
        | kio.schema.offset_commit.v6.request.OffsetCommitRequest
        | kio.schema.offset_commit.v7.request.OffsetCommitRequest
        | kio.schema.offset_commit.v8.request.OffsetCommitRequest
        | kio.schema.offset_commit.v9.request.OffsetCommitRequest
        | kio.schema.offset_commit.v10.request.OffsetCommitRequest
    )
    OffsetCommitResponse = (
        kio.schema.offset_commit.v2.response.OffsetCommitResponse
        | kio.schema.offset_commit.v3.response.OffsetCommitResponse
        | kio.schema.offset_commit.v4.response.OffsetCommitResponse
        | kio.schema.offset_commit.v5.response.OffsetCommitResponse
        | kio.schema.offset_commit.v6.response.OffsetCommitResponse
        | kio.schema.offset_commit.v7.response.OffsetCommitResponse
        | kio.schema.offset_commit.v8.response.OffsetCommitResponse
        | kio.schema.offset_commit.v9.response.OffsetCommitResponse
        | kio.schema.offset_commit.v10.response.OffsetCommitResponse
    )
    OffsetFetchRequest = (
        kio.schema.offset_fetch.v1.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v2.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v3.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v4.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v5.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v6.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v7.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v8.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v9.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v10.request.OffsetFetchRequest
    )
    OffsetFetchResponse = (
        kio.schema.offset_fetch.v1.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v2.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v3.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v4.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v5.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v6.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v7.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v8.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v9.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v10.response.OffsetFetchResponse
    )
    FindCoordinatorRequest = (
        kio.schema.find_coordinator.v0.request.FindCoordinatorRequest
        | kio.schema.find_coordinator.v1.request.FindCoordinatorRequest
        | kio.schema.find_coordinator.v2.request.FindCoordinatorRequest
        | kio.schema.find_coordinator.v3.request.FindCoordinatorRequest
        | kio.schema.find_coordinator.v4.request.FindCoordinatorRequest
        | kio.schema.find_coordinator.v5.request.FindCoordinatorRequest
        | kio.schema.find_coordinator.v6.request.FindCoordinatorRequest
    )
    FindCoordinatorResponse = (
        kio.schema.find_coordinator.v0.response.FindCoordinatorResponse
        | kio.schema.find_coordinator.v1.response.FindCoordinatorResponse
        | kio.schema.find_coordinator.v2.response.FindCoordinatorResponse
        | kio.schema.find_coordinator.v3.response.FindCoordinatorResponse
        | kio.schema.find_coordinator.v4.response.FindCoordinatorResponse
        | kio.schema.find_coordinator.v5.response.FindCoordinatorResponse
        | kio.schema.find_coordinator.v6.response.FindCoordinatorResponse
    )
    JoinGroupRequest = (
        kio.schema.join_group.v0.request.JoinGroupRequest
        | kio.schema.join_group.v1.request.JoinGroupRequest
        | kio.schema.join_group.v2.request.JoinGroupRequest
        | kio.schema.join_group.v3.request.JoinGroupRequest
        | kio.schema.join_group.v4.request.JoinGroupRequest
        | kio.schema.join_group.v5.request.JoinGroupRequest
        | kio.schema.join_group.v6.request.JoinGroupRequest
        | kio.schema.join_group.v7.request.JoinGroupRequest
        | kio.schema.join_group.v8.request.JoinGroupRequest
        | kio.schema.join_group.v9.request.JoinGroupRequest
    )
    JoinGroupResponse = (
        kio.schema.join_group.v0.response.JoinGroupResponse
        | kio.schema.join_group.v1.response.JoinGroupResponse
        | kio.schema.join_group.v2.response.JoinGroupResponse
        | kio.schema.join_group.v3.response.JoinGroupResponse
        | kio.schema.join_group.v4.response.JoinGroupResponse
        | kio.schema.join_group.v5.response.JoinGroupResponse
        | kio.schema.join_group.v6.response.JoinGroupResponse
        | kio.schema.join_group.v7.response.JoinGroupResponse
        | kio.schema.join_group.v8.response.JoinGroupResponse
        | kio.schema.join_group.v9.response.JoinGroupResponse
    )
    HeartbeatRequest = (
        kio.schema.heartbeat.v0.request.HeartbeatRequest
        | kio.schema.heartbeat.v1.request.HeartbeatRequest
        | kio.schema.heartbeat.v2.request.HeartbeatRequest
        | kio.schema.heartbeat.v3.request.HeartbeatRequest
        | kio.schema.heartbeat.v4.request.HeartbeatRequest
    )
    HeartbeatResponse = (
        kio.schema.heartbeat.v0.response.HeartbeatResponse
        | kio.schema.heartbeat.v1.response.HeartbeatResponse
        | kio.schema.heartbeat.v2.response.HeartbeatResponse
        | kio.schema.heartbeat.v3.response.HeartbeatResponse
        | kio.schema.heartbeat.v4.response.HeartbeatResponse
    )
    LeaveGroupRequest = (
        kio.schema.leave_group.v0.request.LeaveGroupRequest
        | kio.schema.leave_group.v1.request.LeaveGroupRequest
        | kio.schema.leave_group.v2.request.LeaveGroupRequest
        | kio.schema.leave_group.v3.request.LeaveGroupRequest
        | kio.schema.leave_group.v4.request.LeaveGroupRequest
        | kio.schema.leave_group.v5.request.LeaveGroupRequest
    )
    LeaveGroupResponse = (
        kio.schema.leave_group.v0.response.LeaveGroupResponse
        | kio.schema.leave_group.v1.response.LeaveGroupResponse
        | kio.schema.leave_group.v2.response.LeaveGroupResponse
        | kio.schema.leave_group.v3.response.LeaveGroupResponse
        | kio.schema.leave_group.v4.response.LeaveGroupResponse
        | kio.schema.leave_group.v5.response.LeaveGroupResponse
    )
    SyncGroupRequest = (
        kio.schema.sync_group.v0.request.SyncGroupRequest
        | kio.schema.sync_group.v1.request.SyncGroupRequest
        | kio.schema.sync_group.v2.request.SyncGroupRequest
        | kio.schema.sync_group.v3.request.SyncGroupRequest
        | kio.schema.sync_group.v4.request.SyncGroupRequest
        | kio.schema.sync_group.v5.request.SyncGroupRequest
    )
    SyncGroupResponse = (
        kio.schema.sync_group.v0.response.SyncGroupResponse
        | kio.schema.sync_group.v1.response.SyncGroupResponse
        | kio.schema.sync_group.v2.response.SyncGroupResponse
        | kio.schema.sync_group.v3.response.SyncGroupResponse
        | kio.schema.sync_group.v4.response.SyncGroupResponse
        | kio.schema.sync_group.v5.response.SyncGroupResponse
    )
    DescribeGroupsRequest = (
        kio.schema.describe_groups.v0.request.DescribeGroupsRequest
        | kio.schema.describe_groups.v1.request.DescribeGroupsRequest
        | kio.schema.describe_groups.v2.request.DescribeGroupsRequest
        | kio.schema.describe_groups.v3.request.DescribeGroupsRequest
        | kio.schema.describe_groups.v4.request.DescribeGroupsRequest
        | kio.schema.describe_groups.v5.request.DescribeGroupsRequest
        | kio.schema.describe_groups.v6.request.DescribeGroupsRequest
    )
    DescribeGroupsResponse = (
        kio.schema.describe_groups.v0.response.DescribeGroupsResponse
        | kio.schema.describe_groups.v1.response.DescribeGroupsResponse
        | kio.schema.describe_groups.v2.response.DescribeGroupsResponse
        | kio.schema.describe_groups.v3.response.DescribeGroupsResponse
        | kio.schema.describe_groups.v4.response.DescribeGroupsResponse
        | kio.schema.describe_groups.v5.response.DescribeGroupsResponse
        | kio.schema.describe_groups.v6.response.DescribeGroupsResponse
    )
    ListGroupsRequest = (
        kio.schema.list_groups.v0.request.ListGroupsRequest
        | kio.schema.list_groups.v1.request.ListGroupsRequest
        | kio.schema.list_groups.v2.request.ListGroupsRequest
        | kio.schema.list_groups.v3.request.ListGroupsRequest
        | kio.schema.list_groups.v4.request.ListGroupsRequest
        | kio.schema.list_groups.v5.request.ListGroupsRequest
    )
    ListGroupsResponse = (
        kio.schema.list_groups.v0.response.ListGroupsResponse
        | kio.schema.list_groups.v1.response.ListGroupsResponse
        | kio.schema.list_groups.v2.response.ListGroupsResponse
        | kio.schema.list_groups.v3.response.ListGroupsResponse
        | kio.schema.list_groups.v4.response.ListGroupsResponse
        | kio.schema.list_groups.v5.response.ListGroupsResponse
    )
    SaslHandshakeRequest = (
        kio.schema.sasl_handshake.v0.request.SaslHandshakeRequest
        | kio.schema.sasl_handshake.v1.request.SaslHandshakeRequest
    )
    SaslHandshakeResponse = (
        kio.schema.sasl_handshake.v0.response.SaslHandshakeResponse
        | kio.schema.sasl_handshake.v1.response.SaslHandshakeResponse
    )
    ApiVersionsRequest = (
        kio.schema.api_versions.v0.request.ApiVersionsRequest
        | kio.schema.api_versions.v1.request.ApiVersionsRequest
        | kio.schema.api_versions.v2.request.ApiVersionsRequest
        | kio.schema.api_versions.v3.request.ApiVersionsRequest
        | kio.schema.api_versions.v4.request.ApiVersionsRequest
    )
    ApiVersionsResponse = (
        kio.schema.api_versions.v0.response.ApiVersionsResponse
        | kio.schema.api_versions.v1.response.ApiVersionsResponse
        | kio.schema.api_versions.v2.response.ApiVersionsResponse
        | kio.schema.api_versions.v3.response.ApiVersionsResponse
        | kio.schema.api_versions.v4.response.ApiVersionsResponse
    )
    CreateTopicsRequest = (
        kio.schema.create_topics.v2.request.CreateTopicsRequest
        | kio.schema.create_topics.v3.request.CreateTopicsRequest
        | kio.schema.create_topics.v4.request.CreateTopicsRequest
        | kio.schema.create_topics.v5.request.CreateTopicsRequest
        | kio.schema.create_topics.v6.request.CreateTopicsRequest
        | kio.schema.create_topics.v7.request.CreateTopicsRequest
    )
    CreateTopicsResponse = (
        kio.schema.create_topics.v2.response.CreateTopicsResponse
        | kio.schema.create_topics.v3.response.CreateTopicsResponse
        | kio.schema.create_topics.v4.response.CreateTopicsResponse
        | kio.schema.create_topics.v5.response.CreateTopicsResponse
        | kio.schema.create_topics.v6.response.CreateTopicsResponse
        | kio.schema.create_topics.v7.response.CreateTopicsResponse
    )
    DeleteTopicsRequest = (
        kio.schema.delete_topics.v1.request.DeleteTopicsRequest
        | kio.schema.delete_topics.v2.request.DeleteTopicsRequest
        | kio.schema.delete_topics.v3.request.DeleteTopicsRequest
        | kio.schema.delete_topics.v4.request.DeleteTopicsRequest
        | kio.schema.delete_topics.v5.request.DeleteTopicsRequest
        | kio.schema.delete_topics.v6.request.DeleteTopicsRequest
    )
    DeleteTopicsResponse = (
        kio.schema.delete_topics.v1.response.DeleteTopicsResponse
        | kio.schema.delete_topics.v2.response.DeleteTopicsResponse
        | kio.schema.delete_topics.v3.response.DeleteTopicsResponse
        | kio.schema.delete_topics.v4.response.DeleteTopicsResponse
        | kio.schema.delete_topics.v5.response.DeleteTopicsResponse
        | kio.schema.delete_topics.v6.response.DeleteTopicsResponse
    )
    DeleteRecordsRequest = (
        kio.schema.delete_records.v0.request.DeleteRecordsRequest
        | kio.schema.delete_records.v1.request.DeleteRecordsRequest
        | kio.schema.delete_records.v2.request.DeleteRecordsRequest
    )
    DeleteRecordsResponse = (
        kio.schema.delete_records.v0.response.DeleteRecordsResponse
        | kio.schema.delete_records.v1.response.DeleteRecordsResponse
        | kio.schema.delete_records.v2.response.DeleteRecordsResponse
    )
    InitProducerIdRequest = (
        kio.schema.init_producer_id.v0.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v1.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v2.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v3.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v4.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v5.request.InitProducerIdRequest
    )
    InitProducerIdResponse = (
        kio.schema.init_producer_id.v0.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v1.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v2.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v3.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v4.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v5.response.InitProducerIdResponse
    )
    OffsetForLeaderEpochRequest = (
        kio.schema.offset_for_leader_epoch.v2.request.OffsetForLeaderEpochRequest
        | kio.schema.offset_for_leader_epoch.v3.request.OffsetForLeaderEpochRequest
        | kio.schema.offset_for_leader_epoch.v4.request.OffsetForLeaderEpochRequest
    )
    OffsetForLeaderEpochResponse = (
        kio.schema.offset_for_leader_epoch.v2.response.OffsetForLeaderEpochResponse
        | kio.schema.offset_for_leader_epoch.v3.response.OffsetForLeaderEpochResponse
        | kio.schema.offset_for_leader_epoch.v4.response.OffsetForLeaderEpochResponse
    )
    AddPartitionsToTxnRequest = (
        kio.schema.add_partitions_to_txn.v0.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v1.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v2.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v3.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v4.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v5.request.AddPartitionsToTxnRequest
    )
    AddPartitionsToTxnResponse = (
        kio.schema.add_partitions_to_txn.v0.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v1.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v2.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v3.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v4.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v5.response.AddPartitionsToTxnResponse
    )
    AddOffsetsToTxnRequest = (
        kio.schema.add_offsets_to_txn.v0.request.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v1.request.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v2.request.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v3.request.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v4.request.AddOffsetsToTxnRequest
    )
    AddOffsetsToTxnResponse = (
        kio.schema.add_offsets_to_txn.v0.response.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v1.response.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v2.response.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v3.response.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v4.response.AddOffsetsToTxnResponse
    )
    EndTxnRequest = (
        kio.schema.end_txn.v0.request.EndTxnRequest
        | kio.schema.end_txn.v1.request.EndTxnRequest
        | kio.schema.end_txn.v2.request.EndTxnRequest
        | kio.schema.end_txn.v3.request.EndTxnRequest
        | kio.schema.end_txn.v4.request.EndTxnRequest
        | kio.schema.end_txn.v5.request.EndTxnRequest
    )
    EndTxnResponse = (
        kio.schema.end_txn.v0.response.EndTxnResponse
        | kio.schema.end_txn.v1.response.EndTxnResponse
        | kio.schema.end_txn.v2.response.EndTxnResponse
        | kio.schema.end_txn.v3.response.EndTxnResponse
        | kio.schema.end_txn.v4.response.EndTxnResponse
        | kio.schema.end_txn.v5.response.EndTxnResponse
    )
    WriteTxnMarkersRequest = (
        kio.schema.write_txn_markers.v1.request.WriteTxnMarkersRequest
        | kio.schema.write_txn_markers.v2.request.WriteTxnMarkersRequest
    )
    WriteTxnMarkersResponse = (
        kio.schema.write_txn_markers.v1.response.WriteTxnMarkersResponse
        | kio.schema.write_txn_markers.v2.response.WriteTxnMarkersResponse
    )
    TxnOffsetCommitRequest = (
        kio.schema.txn_offset_commit.v0.request.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v1.request.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v2.request.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v3.request.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v4.request.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v5.request.TxnOffsetCommitRequest
    )
    TxnOffsetCommitResponse = (
        kio.schema.txn_offset_commit.v0.response.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v1.response.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v2.response.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v3.response.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v4.response.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v5.response.TxnOffsetCommitResponse
    )
    DescribeAclsRequest = (
        kio.schema.describe_acls.v1.request.DescribeAclsRequest
        | kio.schema.describe_acls.v2.request.DescribeAclsRequest
        | kio.schema.describe_acls.v3.request.DescribeAclsRequest
    )
    DescribeAclsResponse = (
        kio.schema.describe_acls.v1.response.DescribeAclsResponse
        | kio.schema.describe_acls.v2.response.DescribeAclsResponse
        | kio.schema.describe_acls.v3.response.DescribeAclsResponse
    )
    CreateAclsRequest = (
        kio.schema.create_acls.v1.request.CreateAclsRequest
        | kio.schema.create_acls.v2.request.CreateAclsRequest
        | kio.schema.create_acls.v3.request.CreateAclsRequest
    )
    CreateAclsResponse = (
        kio.schema.create_acls.v1.response.CreateAclsResponse
        | kio.schema.create_acls.v2.response.CreateAclsResponse
        | kio.schema.create_acls.v3.response.CreateAclsResponse
    )
    DeleteAclsRequest = (
        kio.schema.delete_acls.v1.request.DeleteAclsRequest
        | kio.schema.delete_acls.v2.request.DeleteAclsRequest
        | kio.schema.delete_acls.v3.request.DeleteAclsRequest
    )
    DeleteAclsResponse = (
        kio.schema.delete_acls.v1.response.DeleteAclsResponse
        | kio.schema.delete_acls.v2.response.DeleteAclsResponse
        | kio.schema.delete_acls.v3.response.DeleteAclsResponse
    )
    DescribeConfigsRequest = (
        kio.schema.describe_configs.v1.request.DescribeConfigsRequest
        | kio.schema.describe_configs.v2.request.DescribeConfigsRequest
        | kio.schema.describe_configs.v3.request.DescribeConfigsRequest
        | kio.schema.describe_configs.v4.request.DescribeConfigsRequest
    )
    DescribeConfigsResponse = (
        kio.schema.describe_configs.v1.response.DescribeConfigsResponse
        | kio.schema.describe_configs.v2.response.DescribeConfigsResponse
        | kio.schema.describe_configs.v3.response.DescribeConfigsResponse
        | kio.schema.describe_configs.v4.response.DescribeConfigsResponse
    )
    AlterConfigsRequest = (
        kio.schema.alter_configs.v0.request.AlterConfigsRequest
        | kio.schema.alter_configs.v1.request.AlterConfigsRequest
        | kio.schema.alter_configs.v2.request.AlterConfigsRequest
    )
    AlterConfigsResponse = (
        kio.schema.alter_configs.v0.response.AlterConfigsResponse
        | kio.schema.alter_configs.v1.response.AlterConfigsResponse
        | kio.schema.alter_configs.v2.response.AlterConfigsResponse
    )
    DescribeLogDirsRequest = (
        kio.schema.describe_log_dirs.v1.request.DescribeLogDirsRequest
        | kio.schema.describe_log_dirs.v2.request.DescribeLogDirsRequest
        | kio.schema.describe_log_dirs.v3.request.DescribeLogDirsRequest
        | kio.schema.describe_log_dirs.v4.request.DescribeLogDirsRequest
    )
    DescribeLogDirsResponse = (
        kio.schema.describe_log_dirs.v1.response.DescribeLogDirsResponse
        | kio.schema.describe_log_dirs.v2.response.DescribeLogDirsResponse
        | kio.schema.describe_log_dirs.v3.response.DescribeLogDirsResponse
        | kio.schema.describe_log_dirs.v4.response.DescribeLogDirsResponse
    )
    SaslAuthenticateRequest = (
        kio.schema.sasl_authenticate.v0.request.SaslAuthenticateRequest
        | kio.schema.sasl_authenticate.v1.request.SaslAuthenticateRequest
        | kio.schema.sasl_authenticate.v2.request.SaslAuthenticateRequest
    )
    SaslAuthenticateResponse = (
        kio.schema.sasl_authenticate.v0.response.SaslAuthenticateResponse
        | kio.schema.sasl_authenticate.v1.response.SaslAuthenticateResponse
        | kio.schema.sasl_authenticate.v2.response.SaslAuthenticateResponse
    )
    CreatePartitionsRequest = (
        kio.schema.create_partitions.v0.request.CreatePartitionsRequest
        | kio.schema.create_partitions.v1.request.CreatePartitionsRequest
        | kio.schema.create_partitions.v2.request.CreatePartitionsRequest
        | kio.schema.create_partitions.v3.request.CreatePartitionsRequest
    )
    CreatePartitionsResponse = (
        kio.schema.create_partitions.v0.response.CreatePartitionsResponse
        | kio.schema.create_partitions.v1.response.CreatePartitionsResponse
        | kio.schema.create_partitions.v2.response.CreatePartitionsResponse
        | kio.schema.create_partitions.v3.response.CreatePartitionsResponse
    )
    DeleteGroupsRequest = (
        kio.schema.delete_groups.v0.request.DeleteGroupsRequest
        | kio.schema.delete_groups.v1.request.DeleteGroupsRequest
        | kio.schema.delete_groups.v2.request.DeleteGroupsRequest
    )
    DeleteGroupsResponse = (
        kio.schema.delete_groups.v0.response.DeleteGroupsResponse
        | kio.schema.delete_groups.v1.response.DeleteGroupsResponse
        | kio.schema.delete_groups.v2.response.DeleteGroupsResponse
    )
    ElectLeadersRequest = (
        kio.schema.elect_leaders.v0.request.ElectLeadersRequest
        | kio.schema.elect_leaders.v1.request.ElectLeadersRequest
        | kio.schema.elect_leaders.v2.request.ElectLeadersRequest
    )
    ElectLeadersResponse = (
        kio.schema.elect_leaders.v0.response.ElectLeadersResponse
        | kio.schema.elect_leaders.v1.response.ElectLeadersResponse
        | kio.schema.elect_leaders.v2.response.ElectLeadersResponse
    )
    IncrementalAlterConfigsRequest = (
        kio.schema.incremental_alter_configs.v0.request.IncrementalAlterConfigsRequest
        | kio.schema.incremental_alter_configs.v1.request.IncrementalAlterConfigsRequest
    )
    IncrementalAlterConfigsResponse = (
        kio.schema.incremental_alter_configs.v0.response.IncrementalAlterConfigsResponse
        | kio.schema.incremental_alter_configs.v1.response.IncrementalAlterConfigsResponse
    )
    AlterPartitionReassignmentsRequest = (
        kio.schema.alter_partition_reassignments.v0.request.AlterPartitionReassignmentsRequest
    )
    AlterPartitionReassignmentsResponse = (
        kio.schema.alter_partition_reassignments.v0.response.AlterPartitionReassignmentsResponse
    )
    ListPartitionReassignmentsRequest = (
        kio.schema.list_partition_reassignments.v0.request.ListPartitionReassignmentsRequest
    )
    ListPartitionReassignmentsResponse = (
        kio.schema.list_partition_reassignments.v0.response.ListPartitionReassignmentsResponse
    )
    OffsetDeleteRequest = kio.schema.offset_delete.v0.request.OffsetDeleteRequest
    OffsetDeleteResponse = kio.schema.offset_delete.v0.response.OffsetDeleteResponse
    DescribeClientQuotasRequest = (
        kio.schema.describe_client_quotas.v0.request.DescribeClientQuotasRequest
        | kio.schema.describe_client_quotas.v1.request.DescribeClientQuotasRequest
    )
    DescribeClientQuotasResponse = (
        kio.schema.describe_client_quotas.v0.response.DescribeClientQuotasResponse
        | kio.schema.describe_client_quotas.v1.response.DescribeClientQuotasResponse
    )
    AlterClientQuotasRequest = (
        kio.schema.alter_client_quotas.v0.request.AlterClientQuotasRequest
        | kio.schema.alter_client_quotas.v1.request.AlterClientQuotasRequest
    )
    AlterClientQuotasResponse = (
        kio.schema.alter_client_quotas.v0.response.AlterClientQuotasResponse
        | kio.schema.alter_client_quotas.v1.response.AlterClientQuotasResponse
    )
    DescribeUserScramCredentialsRequest = (
        kio.schema.describe_user_scram_credentials.v0.request.DescribeUserScramCredentialsRequest
    )
    DescribeUserScramCredentialsResponse = (
        kio.schema.describe_user_scram_credentials.v0.response.DescribeUserScramCredentialsResponse
    )
    AlterUserScramCredentialsRequest = (
        kio.schema.alter_user_scram_credentials.v0.request.AlterUserScramCredentialsRequest
    )
    AlterUserScramCredentialsResponse = (
        kio.schema.alter_user_scram_credentials.v0.response.AlterUserScramCredentialsResponse
    )
    UpdateFeaturesRequest = (
        kio.schema.update_features.v0.request.UpdateFeaturesRequest
        | kio.schema.update_features.v1.request.UpdateFeaturesRequest
    )
    UpdateFeaturesResponse = (
        kio.schema.update_features.v0.response.UpdateFeaturesResponse
        | kio.schema.update_features.v1.response.UpdateFeaturesResponse
    )
    DescribeClusterRequest = (
        kio.schema.describe_cluster.v0.request.DescribeClusterRequest
        | kio.schema.describe_cluster.v1.request.DescribeClusterRequest
        | kio.schema.describe_cluster.v2.request.DescribeClusterRequest
    )
    DescribeClusterResponse = (
        kio.schema.describe_cluster.v0.response.DescribeClusterResponse
        | kio.schema.describe_cluster.v1.response.DescribeClusterResponse
        | kio.schema.describe_cluster.v2.response.DescribeClusterResponse
    )
    DescribeProducersRequest = kio.schema.describe_producers.v0.request.DescribeProducersRequest
    DescribeProducersResponse = kio.schema.describe_producers.v0.response.DescribeProducersResponse
    DescribeTransactionsRequest = kio.schema.describe_transactions.v0.request.DescribeTransactionsRequest
    DescribeTransactionsResponse = kio.schema.describe_transactions.v0.response.DescribeTransactionsResponse
    ListTransactionsRequest = (
        kio.schema.list_transactions.v0.request.ListTransactionsRequest
        | kio.schema.list_transactions.v1.request.ListTransactionsRequest
        | kio.schema.list_transactions.v2.request.ListTransactionsRequest
    )
    ListTransactionsResponse = (
        kio.schema.list_transactions.v0.response.ListTransactionsResponse
        | kio.schema.list_transactions.v1.response.ListTransactionsResponse
        | kio.schema.list_transactions.v2.response.ListTransactionsResponse
    )
    ConsumerGroupHeartbeatRequest = (
        kio.schema.consumer_group_heartbeat.v0.request.ConsumerGroupHeartbeatRequest
        | kio.schema.consumer_group_heartbeat.v1.request.ConsumerGroupHeartbeatRequest
    )
    ConsumerGroupHeartbeatResponse = (
        kio.schema.consumer_group_heartbeat.v0.response.ConsumerGroupHeartbeatResponse
        | kio.schema.consumer_group_heartbeat.v1.response.ConsumerGroupHeartbeatResponse
    )
    ConsumerGroupDescribeRequest = (
        kio.schema.consumer_group_describe.v0.request.ConsumerGroupDescribeRequest
        | kio.schema.consumer_group_describe.v1.request.ConsumerGroupDescribeRequest
    )
    ConsumerGroupDescribeResponse = (
        kio.schema.consumer_group_describe.v0.response.ConsumerGroupDescribeResponse
        | kio.schema.consumer_group_describe.v1.response.ConsumerGroupDescribeResponse
    )
    DescribeTopicPartitionsRequest = kio.schema.describe_topic_partitions.v0.request.DescribeTopicPartitionsRequest
    DescribeTopicPartitionsResponse = (
        kio.schema.describe_topic_partitions.v0.response.DescribeTopicPartitionsResponse
    )
