-- Which log the fleet state was built from: the identity of every topic it has consumed
-- (`EventLog.topic_id`). A catch-up refuses a log whose topics were replaced since (a demo
-- --fresh, topics deleted and made again), and every command refuses a region the state does not
-- hold (the topics' names carry their region).
CREATE TABLE consumed_topics (
    projection text NOT NULL,
    topic      text NOT NULL,
    topic_id   text,
    PRIMARY KEY (projection, topic)
);
