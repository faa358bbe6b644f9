-- remove: finish or delete jobs, whatever their state.
-- KEYS: P. ARGV: allow, 'finished' | 'deleted', id1, id2, ...
-- Returns one item per id (see remove_ids).
limit_topics(ARGV[1])
return remove_ids(ARGV, ARGV[2], 3, #ARGV)
