/* kt-run doctor: the machine as libkt sees it. (Placeholder until the hw module lands.) */
#include <stdio.h>
#include <string.h>

#include <kt/kt.h>

#include "commands.h"

int cmd_doctor(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("libkt %s\n", kt_version());
    printf("physical cores: %d\n", kt_hw_physical_cores());
    return 0;
}
