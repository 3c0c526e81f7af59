/*
 * The sandbox process of the test node's pods (tests/cluster/node.sh): it holds
 * the pod's namespaces, reaps the orphans handed to it as PID 1, and exits
 * cleanly when the runtime stops the sandbox. Built with gcc -static so that
 * its image needs nothing else.
 */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signal_number)
{
    (void)signal_number;
    _exit(0);
}

static void reap(int signal_number)
{
    (void)signal_number;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void)
{
    struct sigaction on_stop = {0};
    struct sigaction on_child = {0};

    on_stop.sa_handler = stop;
    on_child.sa_handler = reap;
    on_child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGINT, &on_stop, NULL) != 0 || sigaction(SIGTERM, &on_stop, NULL) != 0
        || sigaction(SIGCHLD, &on_child, NULL) != 0) {
        return 1;
    }
    for (;;) {
        pause();
    }
}
