#!/usr/bin/env bash
# Success rate of `keycld control` over ten target images per system (docs/control.md, "Success
# over ten targets"). Each target state is rendered by `keycld render` as a PNG of the model's
# image size; the controller sees only that image (`--target-image`), and the verdict is judged
# from the simulator's true state (`--target-truth`). The known models (`--model-source known`)
# read the simulator's state, not images, so they get `--target-state` instead.
#
# Usage: scripts/control_targets.sh ENV SIZE OUT_DIR CONTROL_ARGS...
#   ENV           pendulum | cartpole | acrobot (the targets below)
#   SIZE          the model's image size (pixels)
#   OUT_DIR       one folder per target (control.csv, summary.json, errors.png) and the tables
#                 targets.csv and targets.md
#   CONTROL_ARGS  passed to every `keycld control` call: RUN_DIR or --model-source known --env
#                 ENV --size SIZE, and options (--u-max 5, --law angle, --kp ...)
# Environment: KEYCLD (default build/keycld).
# Example:
#   scripts/control_targets.sh pendulum 32 runs/ctl/keycld-targets runs/ctl/keycld --u-max 5
set -euo pipefail
if (($# < 4)); then
  sed -n '2,17p' "$0" >&2
  exit 2
fi
env=$1 size=$2 out=$3
shift 3
keycld=${KEYCLD:-build/keycld}
[[ -x $keycld ]] || { echo "control_targets: $keycld is not an executable (set KEYCLD)" >&2; exit 2; }
[[ $size =~ ^[0-9]+$ ]] || { echo "control_targets: SIZE must be a number of pixels" >&2; exit 2; }
command -v jq >/dev/null || { echo "control_targets: needs jq (apt install jq)" >&2; exit 2; }

case $env in
  # Joint positions (rad, m; 0 = upright). The start is keycld control's default: hanging down,
  # 0.1 rad off.
  pendulum) targets=(0 0.5 -0.5 1 -1 1.5 -1.5 2 -2 2.5) ;;
  cartpole) targets=(0,0 0.5,0 -0.5,0 1,0 -1,0 0.3,0.3 -0.3,-0.3 0,0.5 0.5,-0.5 -1,0.2) ;;
  acrobot) targets=(0,0 0.5,-1 -0.5,1 1,0 -1,0 0.3,0.6 -1,1.5 2,-1 0,1 -2,0.5) ;;
  *) echo "control_targets: ENV must be pendulum, cartpole or acrobot, got '$env'" >&2; exit 2 ;;
esac

mkdir -p "$out"
csv="$out/targets.csv.tmp"
echo "target,success,settle_time_s,final_errors,max_abs_action,steps_per_second,gravity_median_ratio,input_acceleration_median_ratio" >"$csv"
successes=0
for t in "${targets[@]}"; do
  dir="$out/target_${t//,/_}"
  mkdir -p "$dir"
  # shellcheck disable=SC2086  # --qpos takes the joint positions as separate words
  "$keycld" render --env "$env" --qpos ${t//,/ } --size "$size" --out "$dir/target-image.png" \
    >/dev/null
  # The known models read the simulator's state, not images: they get the target state.
  if [[ " $* " == *" known "* ]]; then
    target=(--target-state="$t")
  else
    target=(--target-image "$dir/target-image.png" --target-truth="$t")
  fi
  "$keycld" control "$@" "${target[@]}" \
    --no-video --out "$dir" >"$dir/log.txt" 2>&1 || {
    echo "control_targets: keycld control failed for target $t (see $dir/log.txt):" >&2
    tail -n 3 "$dir/log.txt" >&2
    exit 1
  }
  row=$(jq -r '[(.verdict.success | tostring), (if .verdict.settle_time == null then "" else (.verdict.settle_time * 100 | round / 100 | tostring) end),
                (.verdict.final_errors | map(. * 1000 | round / 1000 | tostring) | join(" ")),
                (.max_abs_action * 1000 | round / 1000 | tostring),
                (.steps_per_second | round | tostring),
                (.reference.along_path.gravity.median_ratio // [] | map(if . == null then "nan" else (. * 100 | round / 100 | tostring) end) | join(" ")),
                (.reference.along_path.input_acceleration.median_ratio // [] | map(if . == null then "nan" else (. * 100 | round / 100 | tostring) end) | join(" "))] | join(",")' "$dir/summary.json")
  echo "${t//,/ },$row" >>"$csv"
  [[ $row == true,* ]] && successes=$((successes + 1))
  echo "target $t: $(jq -r .verdict_line "$dir/summary.json")"
done
mv "$csv" "$out/targets.csv"

md="$out/targets.md.tmp"
{
  echo "# keycld control: $env, ${#targets[@]} target images"
  echo
  echo "Arguments: \`$*\`"
  echo
  echo "**$successes of ${#targets[@]} succeeded.**"
  echo
  # shellcheck disable=SC2016  # the backquotes are Markdown
  echo 'Last two columns: learned/known medians along the path (`--reference`, docs/control.md'
  echo '"Diagnosis"), blank without a reference.'
  echo
  echo "| target | success | settled after (s) | final error | largest \|u\| | steps/s | gravity part | input accel. |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
  tail -n +2 "$out/targets.csv" | while IFS=, read -r tg ok st fe mu sps gm im; do
    echo "| $tg | $ok | ${st:-–} | $fe | $mu | $sps | ${gm:-–} | ${im:-–} |"
  done
} >"$md"
mv "$md" "$out/targets.md"
echo "$successes of ${#targets[@]} targets succeeded; wrote $out/targets.md and $out/targets.csv"
