"""The files a job leaves: one job per output folder (`locks`), what a command wrote in its ``--out``
(`outputs`), what made a reusable piece of work (`identity`), and tar archives read member by member with every
header checked (`tar_archive`)."""
