"""Network: a VPC with private subnets in several AZs, VPC endpoints, flow logs, security groups."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from .settings import Settings

#: Interface endpoints the private Batch nodes, the workstation and MWAA use instead of the NAT gateway.
INTERFACE_ENDPOINTS = {
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Ssm": ec2.InterfaceVpcEndpointAwsService.SSM,
    "SsmMessages": ec2.InterfaceVpcEndpointAwsService.SSM_MESSAGES,
    "Ec2Messages": ec2.InterfaceVpcEndpointAwsService.EC2_MESSAGES,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
}


class NetworkStack(cdk.Stack):
    """VPC, endpoints and the security groups shared by the other stacks.

    ``batch_sg`` allows all traffic from itself: torch's c10d rendezvous (port 5555 by default) and
    NCCL's ephemeral ports between the nodes of a multinode job. Without it the job fails with
    ``RendezvousTimeoutError``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.vpc = ec2.Vpc(
            self, "Vpc",
            ip_addresses=ec2.IpAddresses.cidr("10.42.0.0/16"),
            max_azs=settings.max_azs,
            nat_gateways=1,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=19),
            ],
            gateway_endpoints={"S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)},
        )
        flow_log_group = logs.LogGroup(self, "FlowLogs", retention=logs.RetentionDays.THREE_MONTHS,
                                       removal_policy=cdk.RemovalPolicy.DESTROY)
        self.vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
                              traffic_type=ec2.FlowLogTrafficType.REJECT)
        private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        for name, service in INTERFACE_ENDPOINTS.items():
            self.vpc.add_interface_endpoint(name, service=service, subnets=private, private_dns_enabled=True)

        self.batch_sg = ec2.SecurityGroup(
            self, "BatchNodes", vpc=self.vpc, allow_all_outbound=True,
            description="sim2real Batch GPU nodes: NCCL and torch rendezvous between the nodes of a job",
        )
        self.batch_sg.add_ingress_rule(self.batch_sg, ec2.Port.all_traffic(),
                                       "nodes of one multinode job: NCCL + c10d rendezvous (5555)")
        self.workstation_sg = ec2.SecurityGroup(
            self, "Workstation", vpc=self.vpc, allow_all_outbound=True,
            description="sim2real evaluation workstation (reached through SSM only, no inbound rule)",
        )
