# Stand-in for containers/rl/distributed_run.bash: prints what the Batch environment gave it.
echo "launcher node=${AWS_BATCH_JOB_NODE_INDEX} nodes=${AWS_BATCH_JOB_NUM_NODES} main=${AWS_BATCH_JOB_MAIN_NODE_INDEX} procs=${PROC_PER_NODE}"
echo "TASK=${TASK} MAX_ITERATIONS=${MAX_ITERATIONS} RUN_KEY=${RUN_KEY:-}"
echo "job=${AWS_BATCH_JOB_ID} endpoint=${AWS_ENDPOINT_URL}"
python -c "import boto3; print('sees bucket', boto3.client('s3').head_bucket(Bucket='sim2real-artifacts-123456789012')['ResponseMetadata']['HTTPStatusCode'])"
