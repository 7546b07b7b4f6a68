# The lwIP patch series (stack/lwip/patches/series): how scripts/setup and
# scripts/lwip-series-check read it and apply a patch of it, written once so the two cannot
# differ. Sourced, not run.
# shellcheck shell=bash disable=SC2034  # lwip_series and lwip_series_error are for the caller

# lwip_series_read DIR: sets lwip_series to the patch files DIR/series lists, in order. Returns
# 1 with the reason in lwip_series_error for a series entry with no file, a *.patch file in DIR
# that the series does not list, a file listed twice, or a line that is not one file name.
lwip_series_read() {
  local dir=$1 line f
  local -A listed=()
  lwip_series=()
  lwip_series_error=""
  if [ ! -f "$dir/series" ]; then
    lwip_series_error="no series file in $dir"
    return 1
  fi
  while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in '' | '#'*) continue ;; esac
    if [[ ! "$line" =~ ^[A-Za-z0-9][A-Za-z0-9._+-]*\.patch$ ]]; then
      lwip_series_error="$dir/series: '$line' is not a patch file name (one *.patch name per line, '#' starts a comment)"
      return 1
    fi
    if [ ! -f "$dir/$line" ]; then
      lwip_series_error="$dir/series lists $line, which is not in $dir"
      return 1
    fi
    if [ -n "${listed[$line]:-}" ]; then
      lwip_series_error="$dir/series lists $line twice"
      return 1
    fi
    listed[$line]=1
    lwip_series+=("$line")
  done <"$dir/series"
  for f in "$dir"/*.patch; do
    [ -e "$f" ] || continue
    if [ -z "${listed[${f##*/}]:-}" ]; then
      lwip_series_error="${f##*/} is in $dir but not in its series file: add it where it applies (docs/development.md, \"lwIP patches\")"
      return 1
    fi
  done
  if [ ${#lwip_series[@]} -eq 0 ]; then
    lwip_series_error="$dir/series lists no patch"
    return 1
  fi
}

# lwip_patch_apply TREE PATCH: applies one patch of the series to the lwIP tree TREE, writing
# patch's report to stdout. No fuzz: a hunk applies where its context matches exactly (at most
# some lines off) or the patch fails, so a patch that lwIP moved under is refreshed, not guessed
# at. --forward makes an already applied patch an error; no .orig backups are left in the tree.
lwip_patch_apply() {
  (cd "$1" && patch -p1 --fuzz=0 --forward --batch --no-backup-if-mismatch <"$2")
}
