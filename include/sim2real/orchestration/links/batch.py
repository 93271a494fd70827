"""Extra links for Batch training jobs: one CloudWatch Logs link per node.

The provider's ``CloudWatchEventsLink`` links only the first log stream of a multi-node job;
these links (one per node index, up to :data:`MAX_NODE_LINKS`) cover every node. Each link
instance has its own XCom key and name, so Airflow 3 stores each URL separately
(``BaseOperatorLink.xcom_key``). Console URL layout as in the provider's ``CloudWatchEventsLink``.
"""

from __future__ import annotations

from urllib.parse import quote_plus

import attrs
from airflow.providers.amazon.aws.links.base_aws import BASE_AWS_CONSOLE_LINK, BaseAwsLink

#: Nodes that get their own extra link; further nodes are still listed in the XCom result.
MAX_NODE_LINKS = 8


@attrs.define
class BatchNodeLogsLink(BaseAwsLink):
    """CloudWatch Logs link of node ``node_index`` of a Batch job.

    XCom value persisted by :meth:`persist_node`: ``region_name``, ``aws_domain``,
    ``awslogs_group``, ``awslogs_stream_name``, ``awslogs_region``.
    """

    node_index: int = 0

    format_str = (
        BASE_AWS_CONSOLE_LINK
        + "/cloudwatch/home?region={awslogs_region}#logsV2:log-groups/log-group/{awslogs_group}"
        + "/log-events/{awslogs_stream_name}"
    )

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"CloudWatch logs node {self.node_index}"

    @property
    def key(self) -> str:  # type: ignore[override]
        return f"sim2real_batch_node_logs_{self.node_index}"

    @property
    def xcom_key(self) -> str:
        return f"_link_BatchNodeLogsLink_{self.node_index}"

    def format_link(self, **kwargs) -> str:
        for field in ("awslogs_stream_name", "awslogs_group"):
            if not kwargs.get(field):
                return ""
            kwargs[field] = quote_plus(kwargs[field])
        return super().format_link(**kwargs)

    def persist_node(self, context, operator, region_name: str, aws_partition: str, **kwargs) -> None:
        """Store this node's link fields in XCom (no-op when ``do_xcom_push`` is False)."""
        if not operator.do_xcom_push:
            return
        context["ti"].xcom_push(
            key=self.key,
            value={"region_name": region_name, "aws_domain": self.get_aws_domain(aws_partition), **kwargs},
        )


NODE_LOG_LINKS: tuple[BatchNodeLogsLink, ...] = tuple(BatchNodeLogsLink(node_index=i) for i in range(MAX_NODE_LINKS))
