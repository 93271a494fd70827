"""The GR00T fine-tuning pipeline's step scripts (SageMaker Processing and Training containers):
dataset transform, fine-tune entry point and smoke evaluation."""
