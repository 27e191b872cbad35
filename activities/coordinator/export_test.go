package coordinator

// EncodeAggregate lets tests forge a self-consistent MANIFEST.json, as
// anyone who can write the checkpoint store can.
var EncodeAggregate = encodeAggregate
