# pip's own lines cut to a sign of life, for scripts/install.sh: how many packages pip has found so far (every 25;
# "Collecting" from an index, "Processing" from a file),
# then how many it installs (pip's quiet mode printed nothing for a minute or two at a time). pip's warnings and
# errors go to stderr, which this never sees.
/^(Collecting|Processing) / { if (++found % 25 == 0) { printf "[install]   %d packages found so far\n", found; fflush() } }
/^Installing collected packages: / {
  sub(/^Installing collected packages: /, "")
  count = split($0, names, ", ")
  printf "[install]   installing %d package%s\n", count, (count == 1 ? "" : "s")
  fflush()
}
