#!/bin/bash
# The image's HEALTHCHECK: exits 0 when GET /v2/health/ready on
# 127.0.0.1:PORT (default 8000) answers 200. It talks HTTP over bash's
# /dev/tcp so the image needs no HTTP client.
#
#   slimserve-ready [PORT]
port=${1:-8000}
exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
printf 'GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
read -r -t 2 _ code _ <&3 || exit 1
[ "$code" = 200 ]
