// The health check of the mongo service of deploy/docker-compose.secured.yml, and its
// one-time bootstrap. Run by mongosh every 10 s, connected over 127.0.0.1 (TLS) as no user:
//
//   1. no replica-set configuration yet (first start): rs.initiate rs0, one member
//      mongo:27017; unhealthy until it is the primary;
//   2. healthy when `crawler` can log in with MONGO_PASSWORD;
//   3. otherwise (first start): create the root user `admin` (MONGO_ROOT_PASSWORD), then,
//      as admin, the user `crawler` with readWrite on the database `crawler`.
//
// Steps 1 and 3 rely on mongod's localhost exception: a connection over the loopback
// interface may initiate the replica set and create the first user while no user exists;
// it has no rights at all once one does. This replaces the image's MONGO_INITDB_ROOT_*
// mechanism, which runs its init on a temporary standalone server without --replSet and
// so cannot initiate the set. The passwords come from the container's environment
// (process.env), never from a command line.
const env = process.env;
const TLS = "tls=true&tlsCAFile=/tls/ca.pem&directConnection=true";

function login(user, password) {
  // A connection as *user* (users live in admin); throws on a wrong user or password.
  const uri = `mongodb://${encodeURIComponent(user)}:${encodeURIComponent(password)}` +
    `@127.0.0.1:27017/?authSource=admin&${TLS}`;
  const conn = new Mongo(uri);
  conn.getDB("admin").runCommand({ ping: 1 });
  return conn;
}

function canLogin(user, password) {
  try {
    login(user, password).close();
    return true;
  } catch (e) {
    return false;
  }
}

// null when healthy, else what is missing
function check() {
  for (const name of ["MONGO_ROOT_PASSWORD", "MONGO_PASSWORD"]) {
    if (!env[name]) return `${name} is not set in the mongo container`;
  }
  const hello = db.adminCommand({ hello: 1 });
  if (!hello.setName) {
    rs.initiate({ _id: "rs0", members: [{ _id: 0, host: "mongo:27017" }] });
    return "replica set rs0 initiated, waiting for the election";
  }
  if (!hello.isWritablePrimary) return "not the primary yet";
  if (canLogin("crawler", env.MONGO_PASSWORD)) return null;

  if (!canLogin("admin", env.MONGO_ROOT_PASSWORD)) {
    // No user yet: the localhost exception allows this one. (If users exist, it fails:
    // MONGO_ROOT_PASSWORD is not the password of admin.)
    db.getSiblingDB("admin").createUser({
      user: "admin", pwd: env.MONGO_ROOT_PASSWORD, roles: [{ role: "root", db: "admin" }],
    });
  }
  const root = login("admin", env.MONGO_ROOT_PASSWORD);
  try {
    const admin = root.getDB("admin");
    if (admin.getUser("crawler") !== null) {
      return "user crawler exists but MONGO_PASSWORD is not its password " +
        "(db.changeUserPassword, README.md)";
    }
    admin.createUser({
      user: "crawler", pwd: env.MONGO_PASSWORD, roles: [{ role: "readWrite", db: "crawler" }],
    });
  } finally {
    root.close();
  }
  return canLogin("crawler", env.MONGO_PASSWORD) ? null : "user crawler cannot log in";
}

let problem;
try {
  problem = check();
} catch (e) {
  problem = String(e && e.message ? e.message : e);
}
if (problem !== null) {
  print(`mongo: ${problem}`);
  quit(1);
}
quit(0);
