echo "about to fail"
echo "boom" >&2
exit 3
