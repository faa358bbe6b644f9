-- remove: finish or delete jobs, whatever their state.
-- KEYS: P.
-- argv: allow kind
-- kind is 'finished' or 'deleted'; the ids follow.
-- Returns one item per id (see remove_ids).
limit_topics(ARGV[ARG.allow])
return remove_ids(ARGV, ARGV[ARG.kind], NARGS + 1, #ARGV)
