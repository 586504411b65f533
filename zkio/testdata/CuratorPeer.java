// CuratorPeer is a Curator client the interop tests drive over stdin and
// stdout: "mutex <connect> <path>" takes an InterProcessMutex, "latch
// <connect> <path> <id>" joins a LeaderLatch.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

public class CuratorPeer {
    static synchronized void say(String s) {
        System.out.println(s);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], connect = args[1], path = args[2];
        CuratorFramework client = CuratorFrameworkFactory.newClient(connect, 10000, 5000, new RetryOneTime(100));
        client.start();
        client.blockUntilConnected();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        if (mode.equals("mutex")) {
            InterProcessMutex mutex = new InterProcessMutex(client, path);
            say("WAITING");
            mutex.acquire();
            say("ACQUIRED");
            in.readLine(); // any line releases
            mutex.release();
            say("RELEASED");
        } else {
            LeaderLatch latch = new LeaderLatch(client, path, args[3]);
            latch.addListener(new LeaderLatchListener() {
                public void isLeader() { say("LEADER"); }
                public void notLeader() { say("NOTLEADER"); }
            });
            latch.start();
            say("STARTED");
            for (String line; (line = in.readLine()) != null; ) {
                if (line.equals("leader")) {
                    say("IS " + latch.getLeader().getId());
                } else if (line.equals("close")) {
                    break;
                }
            }
            latch.close();
            say("CLOSED");
        }
        client.close();
    }
}
