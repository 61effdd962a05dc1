#!/usr/bin/env bash
# The npm packages of the playground's browser test (tests/browser/, run by tests/playground.rs):
# playwright-core, pinned in package-lock.json, driving Debian's chromium (scripts/apt-packages.txt).
# Idempotent: installs only when node_modules/ does not match package-lock.json. No browser is
# downloaded: playwright-core ships none, and the test points it at /usr/bin/chromium.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf 'setup-browser-tests: %s\n' "$*" >&2; }

command -v node >/dev/null || { say "node not found: install Node.js 20 or later"; exit 1; }
command -v npm >/dev/null || { say "npm not found: install it with Node.js"; exit 1; }
major="$(node -p 'process.versions.node.split(".")[0]')"
if ((major < 20)); then
  say "node $(node --version) is too old for playwright-core: install Node.js 20 or later"
  exit 1
fi

# npm ci writes node_modules/.package-lock.json; when it matches the lock file, nothing to do.
if [[ -f node_modules/.package-lock.json && -f node_modules/playwright-core/package.json ]] &&
  node -e '
    const fs = require("fs");
    const want = JSON.parse(fs.readFileSync("package-lock.json")).packages;
    const have = JSON.parse(fs.readFileSync("node_modules/.package-lock.json")).packages;
    for (const [path, p] of Object.entries(want)) {
      if (path && (!have[path] || have[path].version !== p.version)) process.exit(1);
    }' 2>/dev/null; then
  exit 0
fi
say "installing npm packages (npm ci)"
npm ci --no-audit --no-fund --loglevel=error
