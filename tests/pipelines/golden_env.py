"""The fixed environment the golden definition is filled with (the sandbox's account values)."""

ROLE_ARN = "arn:aws:iam::123456789012:role/sim2real-pipeline"
BUCKET = "sim2real-artifacts-123456789012"
GROUP = "sim2real-groot-models"
ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
IMAGES = {
    "processing": f"{ECR}/sim2real-groot-processing@sha256:" + "1" * 64,
    "training": f"{ECR}/sim2real-groot-training@sha256:" + "2" * 64,
    "smoke_eval": f"{ECR}/sim2real-groot-smoke-eval@sha256:" + "3" * 64,
    "inference": f"{ECR}/sim2real-groot-training@sha256:" + "2" * 64,
}
KWARGS = {"role_arn": ROLE_ARN, "bucket": BUCKET, "model_package_group": GROUP, "images": IMAGES}
GOLDEN_NAME = "groot_definition.golden.json"
