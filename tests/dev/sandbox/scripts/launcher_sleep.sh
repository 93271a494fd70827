echo "started long job"
sleep 120
echo "should never get here"
