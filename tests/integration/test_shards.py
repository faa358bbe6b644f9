#!/usr/bin/env python3
"""The most shards a deployment may have (1,024, config key 'shards') on one
Redis: the calls that go to every shard at once (a batch add of 1,000 jobs
spread over hundreds of shards, a pop of 64 topics that counts every shard,
a batch finish) work, with nothing cut off or refused."""

from dqtest import DeploymentTestCase, main, unique


class ManyShards(DeploymentTestCase):
    DEPLOYMENT_KW = dict(redis_mode="single", shards=1024, buckets=2, workers=1, threads=4)

    def test_batches_over_1024_shards(self):
        t = unique("wide")
        ids = ["%s-%d" % (t, i) for i in range(1000)]
        self.assertEqual(len({self.c.shard_of(i) for i in ids}) > 500, True)
        st, r = self.c.req("add", jobs=[{"topic": t, "id": j, "body": {"j": j}} for j in ids])
        self.assertOk(st, r)
        self.assertEqual([x["id"] for x in r["results"]], ids)
        topics = [unique("none") for _ in range(63)] + [t]
        popped = []
        while len(popped) < len(ids):
            st, r = self.c.req("pop", topics=topics, count=100)
            self.assertOk(st, r)
            self.assertTrue(r["jobs"], "jobs left: %d" % (len(ids) - len(popped)))
            popped += [j["id"] for j in r["jobs"]]
        self.assertEqual(sorted(popped), sorted(ids))
        st, r = self.c.req("finish", ids=ids)
        self.assertOk(st, r)
        self.assertEqual({x["code"] if "code" in x else "ok" for x in r["results"]}, {"ok"})
        st, r = self.c.req("stats", topic=t)
        self.assertEqual(r["topics"][t]["finished"], 1000)


if __name__ == "__main__":
    main()
