"""Sample EventBridge events, one per detail-type the waits consume, in the shapes of the AWS documentation's
examples (ids and names shortened; the page of each is named above it)."""

from __future__ import annotations

# AWS Batch User Guide, "Job state change events"
BATCH = {
    "version": "0", "id": "c8f9c4b5-76e5-d76a-f980-7011e206042b", "detail-type": "Batch Job State Change",
    "source": "aws.batch", "account": "123456789012", "time": "2022-01-11T23:36:40Z", "region": "us-east-1",
    "resources": ["arn:aws:batch:us-east-1:123456789012:job/4c7599ae-0a82-49aa-ba5a-4727fcce14a8"],
    "detail": {
        "jobArn": "arn:aws:batch:us-east-1:123456789012:job/4c7599ae-0a82-49aa-ba5a-4727fcce14a8",
        "jobName": "event-test", "jobId": "4c7599ae-0a82-49aa-ba5a-4727fcce14a8",
        "jobQueue": "arn:aws:batch:us-east-1:123456789012:job-queue/sim2real-gpu", "status": "RUNNABLE",
        "attempts": [], "createdAt": 1641944200058, "retryStrategy": {"attempts": 2, "evaluateOnExit": []},
        "dependsOn": [], "jobDefinition": "arn:aws:batch:us-east-1:123456789012:job-definition/sim2real-train:1",
        "parameters": {}, "container": {"image": "busybox", "command": ["sleep", "600"], "volumes": [],
                                         "environment": [], "mountPoints": [], "ulimits": [],
                                         "networkInterfaces": [], "resourceRequirements": [
                                             {"value": "2", "type": "VCPU"}, {"value": "256", "type": "MEMORY"}],
                                         "secrets": []},
        "tags": {}, "propagateTags": False, "platformCapabilities": [],
    },
}

# CodeBuild User Guide, "Build notifications input format reference"
CODEBUILD = {
    "version": "0", "id": "bfdc1220-60ff-44be-b9e7-8b6c9e3f1d9f", "detail-type": "CodeBuild Build State Change",
    "source": "aws.codebuild", "account": "123456789012", "time": "2017-09-01T16:14:28Z", "region": "us-west-2",
    "resources": ["arn:aws:codebuild:us-west-2:123456789012:build/my-sample-project:8745a7a9-c340-456a-9166-edf953571bEX"],
    "detail": {
        "build-status": "FAILED", "project-name": "my-sample-project",
        "build-id": "arn:aws:codebuild:us-west-2:123456789012:build/my-sample-project:8745a7a9-c340-456a-9166-edf953571bEX",
        "additional-information": {
            "timeout-in-minutes": 60, "build-complete": True, "initiator": "MyCodeBuildDemoUser",
            "build-start-time": "Sep 1, 2017 4:12:29 PM",
            "source": {"location": "codebuild-123456789012-input-bucket/my-input-artifact.zip", "type": "S3"},
            "logs": {"group-name": "/aws/codebuild/my-sample-project",
                     "stream-name": "8745a7a9-c340-456a-9166-edf953571bEX", "deep-link": "https://console.aws.amazon.com/"},
            "phases": [
                {"phase-context": [], "start-time": "Sep 1, 2017 4:12:29 PM", "end-time": "Sep 1, 2017 4:12:29 PM",
                 "duration-in-seconds": 0, "phase-type": "SUBMITTED", "phase-status": "SUCCEEDED"},
                {"phase-context": ["COMMAND_EXECUTION_ERROR: Error while executing command: make. Reason: exit status 2"],
                 "start-time": "Sep 1, 2017 4:13:05 PM", "end-time": "Sep 1, 2017 4:14:21 PM",
                 "duration-in-seconds": 75, "phase-type": "BUILD", "phase-status": "FAILED"},
                {"start-time": "Sep 1, 2017 4:14:21 PM", "phase-type": "COMPLETED"},
            ],
        },
        "current-phase": "COMPLETED", "current-phase-context": "[]", "version": "1",
    },
}

# Systems Manager User Guide, "Amazon EventBridge event examples for Systems Manager" (Run Command)
SSM = {
    "version": "0", "id": "4d7fba6a-3bd0-4e2c-9ad0-9d1f6a4b6e1d",
    "detail-type": "EC2 Command Invocation Status-change Notification", "source": "aws.ssm",
    "account": "123456789012", "time": "2016-07-10T21:51:32Z", "region": "us-east-1",
    "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"],
    "detail": {"command-id": "e8d3c0e4-71f7-4491-898f-c9b35bee5f3b", "document-name": "AWS-RunShellScript",
               "instance-id": "i-abcd1111", "requested-date-time": "2016-07-10T21:51:30.049Z", "status": "Success"},
}

# SageMaker Developer Guide, "Events that Amazon SageMaker AI sends to Amazon EventBridge"
PIPELINE = {
    "version": "0", "id": "315c1398-40ff-a850-213b-158f73e60175",
    "detail-type": "SageMaker Model Building Pipeline Execution Status Change", "source": "aws.sagemaker",
    "account": "123456789012", "time": "2021-03-15T16:10:11Z", "region": "us-east-1",
    "resources": ["arn:aws:sagemaker:us-east-1:123456789012:pipeline/mypipeline",
                  "arn:aws:sagemaker:us-east-1:123456789012:pipeline/mypipeline/execution/p4jn9xou8a8s"],
    "detail": {"executionStartTime": "2021-03-15T16:03:13Z", "executionEndTime": "2021-03-15T16:10:10Z",
               "currentPipelineExecutionStatus": "Succeeded", "previousPipelineExecutionStatus": "Executing",
               "pipelineExecutionDisplayName": "test-execution",
               "pipelineExecutionArn": "arn:aws:sagemaker:us-east-1:123456789012:pipeline/mypipeline/execution/p4jn9xou8a8s"},
}

# same page: "SageMaker model package state change"
MODEL_PACKAGE = {
    "version": "0", "id": "844e2571-85d4-695f-b930-0153b71dcb42", "detail-type": "SageMaker Model Package State Change",
    "source": "aws.sagemaker", "account": "123456789012", "time": "2021-02-24T17:00:14Z", "region": "us-east-1",
    "resources": ["arn:aws:sagemaker:us-east-1:123456789012:model-package/sim2real-groot-models/1"],
    "detail": {"ModelPackageGroupName": "sim2real-groot-models", "ModelPackageVersion": 1,
               "ModelPackageArn": "arn:aws:sagemaker:us-east-1:123456789012:model-package/sim2real-groot-models/1",
               "CreationTime": "2021-02-24T01:12:51.336Z",
               "InferenceSpecification": {"Containers": [{"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/groot:1",
                                                          "ModelDataUrl": "s3://bucket/model.tar.gz"}],
                                          "SupportedContentTypes": ["application/json"],
                                          "SupportedResponseMIMETypes": ["application/json"]},
               "ModelPackageStatus": "Completed",
               "ModelPackageStatusDetails": {"ValidationStatuses": [], "ImageScanStatuses": []},
               "CertifyForMarketplace": False, "ModelApprovalStatus": "Approved"},
}

# AWS IoT Greengrass V2 Developer Guide, "Get deployment status notifications"
GREENGRASS = {
    "version": "0", "id": "3a3c8a5b-0ab9-7c6d-4bd4-0c4e0b0e57e6",
    "detail-type": "Greengrass V2 Effective Deployment Status Change", "source": "aws.greengrass",
    "account": "123456789012", "time": "2021-11-26T18:30:46Z", "region": "us-west-2",
    "resources": ["arn:aws:greengrass:us-west-2:123456789012:coreDevices:MyGreengrassCore"],
    "detail": {"deploymentId": "4f38f1a7-3dd0-42a1-af48-EXAMPLE09681", "coreDeviceExecutionStatus": "FAILED",
               "statusDetails": {"errorStack": ["DEPLOYMENT_FAILURE", "NO_AVAILABLE_COMPONENT_VERSION"],
                                 "errorTypes": ["REQUEST_ERROR"]},
               "reason": "NO_AVAILABLE_COMPONENT_VERSION: Component com.example.HelloWorld version 1.0.0 not found",
               "coreDeviceThingName": "MyGreengrassCore"},
}

# SageMaker Developer Guide, same page: "SageMaker HyperPod cluster state change"
HYPERPOD = {
    "version": "0", "id": "0bd4a141-0a02-9d8a-f977-3924c3fb259c", "detail-type": "SageMaker HyperPod Cluster State Change",
    "source": "aws.sagemaker", "account": "111122223333", "time": "2025-04-28T16:59:01Z", "region": "us-west-2",
    "resources": ["arn:aws:sagemaker:us-west-2:111122223333:cluster/sample-cluster"],
    "detail": {"ClusterArn": "arn:aws:sagemaker:us-west-2:111122223333:cluster/sample-cluster",
               "ClusterName": "sample-cluster", "ClusterStatus": "InService", "CreationTime": 1745858447412,
               "FailureMessage": "",
               "InstanceGroups": [{"CurrentCount": 1, "InstanceGroupName": "gpu", "InstanceType": "ml.g5.12xlarge",
                                   "Status": "InService", "TargetCount": 1, "ThreadsPerCore": 1}]},
}

ALL = {"batch": BATCH, "codebuild": CODEBUILD, "ssm": SSM, "pipeline": PIPELINE, "model_package": MODEL_PACKAGE,
       "greengrass": GREENGRASS, "hyperpod": HYPERPOD}
