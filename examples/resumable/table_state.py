"""The state store in Azure Table storage (or Azurite): If-Match on the entity's ETag.

Needs ``pip install 'cloudqueue[tables]'`` (azure-data-tables); imported only when used. One
entity per job (PartitionKey = job id, RowKey ``progress``); the SDK's 412 on a stale ETag and 409
on a second create become ``ConflictError``.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from cloudqueue import ConfigurationError
from examples.resumable.state import ConflictError, JobState, Versioned

if TYPE_CHECKING:
    from azure.data.tables import TableClient

ROW_KEY = "progress"
DEFAULT_TABLE = "jobstate"


class TableStateStore:
    """Job states as entities of one table."""

    def __init__(self, table: TableClient) -> None:
        self._table = table

    @classmethod
    def from_connection_string(
        cls, connection_string: str, table_name: str = DEFAULT_TABLE
    ) -> TableStateStore:
        """Open (and create if missing) the table in the connection string's account."""
        from azure.core.exceptions import ResourceExistsError

        try:
            from azure.data.tables import TableClient
        except ImportError:
            raise ConfigurationError(
                "the job state table needs azure-data-tables: pip install 'cloudqueue[tables]'"
            ) from None
        table = TableClient.from_connection_string(connection_string, table_name)
        with contextlib.suppress(ResourceExistsError):  # made by an earlier run or worker
            table.create_table()
        return cls(table)

    def load(self, job_id: str) -> Versioned | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            entity = self._table.get_entity(job_id, ROW_KEY)
        except ResourceNotFoundError:
            return None
        state = JobState.model_validate_json(entity["state"])
        return Versioned(state, str(entity.metadata["etag"]))

    def create(self, job_id: str, state: JobState) -> Versioned:
        from azure.core.exceptions import ResourceExistsError

        try:
            written = self._table.create_entity(self._entity(job_id, state))
        except ResourceExistsError:
            raise ConflictError(f"job {job_id} already has a state") from None
        return Versioned(state, written["etag"])

    def replace(self, job_id: str, state: JobState, version: str) -> Versioned:
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceModifiedError
        from azure.data.tables import UpdateMode

        try:
            written = self._table.update_entity(
                self._entity(job_id, state),
                mode=UpdateMode.REPLACE,
                etag=version,
                match_condition=MatchConditions.IfNotModified,
            )
        except ResourceModifiedError:  # 412 Precondition Failed: the ETag is stale
            raise ConflictError(f"job {job_id} changed since it was read") from None
        return Versioned(state, written["etag"])

    def close(self) -> None:
        self._table.close()

    @staticmethod
    def _entity(job_id: str, state: JobState) -> dict[str, str]:
        return {"PartitionKey": job_id, "RowKey": ROW_KEY, "state": state.model_dump_json()}
