// CuratorPeer is a Curator client the interop tests drive over stdin and
// stdout: "mutex <connect> <path>" takes an InterProcessMutex, "latch
// <connect> <path> <id>" joins a LeaderLatch, "barrier <connect> <path>"
// runs a DistributedBarrier's set, remove and wait as told, "double
// <connect> <path> <count>" a DistributedDoubleBarrier's enter and leave,
// "semaphore <connect> <path> <n>" an InterProcessSemaphoreV2's acquire and
// release of one lease.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.barriers.DistributedBarrier;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
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
        } else if (mode.equals("barrier")) {
            DistributedBarrier barrier = new DistributedBarrier(client, path);
            say("STARTED");
            for (String line; (line = in.readLine()) != null; ) {
                if (line.equals("set")) {
                    barrier.setBarrier();
                    say("SET");
                } else if (line.equals("remove")) {
                    barrier.removeBarrier();
                    say("REMOVED");
                } else if (line.equals("wait")) {
                    barrier.waitOnBarrier();
                    say("PASSED");
                }
            }
        } else if (mode.equals("semaphore")) {
            InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(client, path, Integer.parseInt(args[3]));
            say("STARTED");
            Lease lease = null;
            for (String line; (line = in.readLine()) != null; ) {
                if (line.equals("acquire")) {
                    say("WAITING");
                    lease = sem.acquire();
                    say("ACQUIRED");
                } else if (line.equals("release")) {
                    sem.returnLease(lease);
                    say("RELEASED");
                }
            }
        } else if (mode.equals("double")) {
            DistributedDoubleBarrier barrier = new DistributedDoubleBarrier(client, path, Integer.parseInt(args[3]));
            say("STARTED");
            for (String line; (line = in.readLine()) != null; ) {
                if (line.equals("enter")) {
                    say("ENTERING");
                    barrier.enter();
                    say("ENTERED");
                } else if (line.equals("leave")) {
                    say("LEAVING");
                    barrier.leave();
                    say("LEFT");
                }
            }
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
