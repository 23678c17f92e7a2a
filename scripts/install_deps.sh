#!/usr/bin/env bash
# scripts/install_deps.sh — installs the Debian packages lockstep builds with,
# only those missing (apt-get update runs once, and only if something is missing).
# Usage: scripts/install_deps.sh [extra-package ...]
set -euo pipefail

packages=(build-essential cmake libeigen3-dev doctest-dev libdnnl-dev zlib1g-dev
          libgloo-dev libopenmpi-dev openmpi-bin libcli11-dev dataset-fashion-mnist python3-numpy "$@")

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${missing[@]}"
fi
